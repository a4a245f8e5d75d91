"""Reports from saved runs: tables (pandas) and a self-contained HTML page. Reads results.json only."""

from dspark_bench.reports.html import render_html
from dspark_bench.reports.tables import levels_frame, load_results, summary_frame

__all__ = ["levels_frame", "load_results", "render_html", "summary_frame"]
