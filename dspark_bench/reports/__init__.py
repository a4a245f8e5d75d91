"""Reports from saved runs: tables (pandas), a self-contained HTML page, and CI gates.

Reads a run folder only (results.json and the records), through ``loadtests.results`` and
``loadtests.records``, the owners of those files.
"""

from dspark_bench.reports.html import render_html
from dspark_bench.reports.tables import summary_frame

__all__ = ["render_html", "summary_frame"]
