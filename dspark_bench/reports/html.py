"""A self-contained HTML page for one run: inline CSS, plots embedded as PNG data, output escaped."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dspark_bench.loadtests.machine import machine_summary  # noqa: E402
from dspark_bench.loadtests.results import levels_frame  # noqa: E402
from dspark_bench.reports.article import article_table, interval_note, load_records, repeat_count  # noqa: E402
from dspark_bench.reports.tables import SPEEDUP_COLUMN, summary_frame, tag_frame  # noqa: E402

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#222;max-width:1200px}
table{border-collapse:collapse;font-size:.85rem;margin:1rem 0}th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}
th{background:#f3f3f3}code,pre{background:#f6f6f6;padding:.1rem .3rem;font-size:.8rem;white-space:pre-wrap;word-break:break-all}
.bad{color:#b00020}.ok{color:#1b5e20}.wide{overflow-x:auto;max-width:100%}
"""


def _png(fig, alt: str) -> str:
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}">'


def _plot(frame, value: str, ylabel: str, log_y: bool = False) -> str:
    """One line per arm against concurrency, a panel per scenario (median over repeats)."""
    if value not in frame or frame[value].isna().all():
        return ""
    frame = frame.groupby(["scenario", "level", "arm"], as_index=False)[value].median()
    fig, axes = plt.subplots(1, max(1, frame["scenario"].nunique()), figsize=(7, 3.5), squeeze=False)
    for ax, (scenario, part) in zip(axes[0], frame.groupby("scenario"), strict=False):
        for arm, rows in part.groupby("arm"):
            ax.plot(rows["level"], rows[value], marker="o", label=arm)
        ax.set_xscale("log", base=2)
        if log_y and (part[value] > 0).any():
            ax.set_yscale("log")
        ax.set_xlabel("concurrency")
        ax.set_ylabel(ylabel)
        ax.set_title(scenario)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    return _png(fig, ylabel)


def _invalid_stacked(detail) -> str:
    """Invalid rate by category, stacked, per arm (all levels together)."""
    columns = [
        c
        for c in ("rate_parse_error", "rate_schema_violation", "rate_truncated", "rate_http_error", "rate_timeout")
        if c in detail
    ]
    if not columns or detail.empty:
        return ""
    rates = detail.groupby("arm")[columns].mean()
    fig, ax = plt.subplots(figsize=(7, 3.0))
    bottom = None
    for column in columns:
        ax.bar(rates.index, rates[column] * 100, bottom=bottom, label=column.removeprefix("rate_"))
        bottom = rates[column] * 100 if bottom is None else bottom + rates[column] * 100
    ax.set_ylabel("invalid answers (%)")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    return _png(fig, "invalid answers by category")


def _invalid_samples(records, per_category: int = 20) -> list[str]:
    """Failed answers grouped by verdict, each with its arm, request id, error detail and escaped output."""
    if records.empty:
        return []
    failed = records[records["verdict"] != "valid"]
    parts = ["<h2>Invalid answers by category</h2>"]
    if failed.empty:
        return [*parts, "<p>None: every measured answer was valid.</p>"]
    for verdict, rows in failed.groupby("verdict"):
        items = "".join(
            f"<li><b>{html.escape(str(r.arm))}</b> <code>{html.escape(str(r.request_id))}</code> "
            f"{html.escape(str(r.detail or r.error or ''))}<pre>{html.escape(str(r.output or '')[:2000])}</pre></li>"
            for r in rows.head(per_category).itertuples()
        )
        parts.append(
            f"<details><summary>{html.escape(str(verdict))}: {len(rows)} answer(s)"
            f"{f', first {per_category} shown' if len(rows) > per_category else ''}</summary><ul>{items}</ul></details>"
        )
    return parts


def render_html(results: dict[str, Any], out_path: Path) -> Path:
    summary = summary_frame(results)
    esc = html.escape
    status = (
        '<span class="ok">complete</span>'
        if results.get("complete")
        else f'<span class="bad">INCOMPLETE: {esc(str(results.get("error")))}</span>'
    )
    config = results.get("config", {})
    machine = results.get("machine", {})
    arms = "".join(
        f"<li><b>{esc(name)}</b> ({esc(info.get('mode', ''))}): {esc(info.get('description', ''))}<br>"
        f"<code>{esc(' '.join(info.get('argv') or [info.get('base_url', '')]))}</code></li>"
        for name, info in results.get("arms", {}).items()
    )
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>JSON benchmark {esc(results.get('started', ''))}</title>",
        f"<style>{STYLE}</style></head><body><h1>JSON serving benchmark</h1><p>Status: {status}</p>",
        f"<p>Model <code>{esc(str(config.get('model')))}</code>; scenarios {esc(', '.join(config.get('scenarios', [])))}; "
        f"{config.get('requests_per_level')} requests per level (+{config.get('warmup_requests')} warm-up), "
        f"max_tokens {config.get('max_tokens')}, temperature {config.get('temperature')}; started {esc(results.get('started', ''))}.</p>",
        f"<p>Machine: {esc(machine_summary(machine))}, GPU {esc(str(machine.get('gpu')))}; "
        f"git {esc(str(machine.get('git_commit')))}; versions {esc(str(machine.get('versions')))}</p>",
        f"<h2>Arms</h2><ul>{arms}</ul>",
    ]
    records = load_records(out_path.parent)
    # scenario names as the levels record them (a dataset's name is its file's stem, not the path given)
    for scenario in sorted({level["scenario"] for level in results.get("levels", [])}):
        for base in ("baseline", "baseline-constrained"):
            table = article_table(records, results, scenario, base=base, treat="dspark")
            if not table.empty:
                parts += [
                    f"<h2>The article's table: {esc(scenario)}, dspark against {esc(base)}</h2>",
                    table.to_html(index=False, na_rep="-"),
                    f"<p>{esc(interval_note(repeat_count(records)))}</p>",
                ]
    if not summary.empty:
        detail = levels_frame(results)
        parts += [
            "<h2>Summary (median over repeats)</h2>",
            summary.to_html(index=False, float_format=lambda v: f"{v:.2f}", na_rep="-"),
            _plot(summary, "eff tok/s", "effective JSON tokens/s"),
            _plot(summary, "raw tok/s", "raw output tokens/s"),
            _plot(summary, SPEEDUP_COLUMN, f"speed-up: effective tok/s / {SPEEDUP_COLUMN.removeprefix('x ')}'s"),
            _plot(detail, "latency_p50_ms", "P50 latency (ms)", log_y=True),
            _plot(summary, "P95 ms", "P95 latency (ms)", log_y=True),
            _plot(detail, "latency_p99_ms", "P99 latency (ms)", log_y=True),
            _plot(summary, "TTFT P50 ms", "TTFT P50 (ms)", log_y=True),
            _plot(detail, "server:mean_acceptance_length", "speculative mean acceptance length"),
            _invalid_stacked(detail),
        ]
        tags = tag_frame(records)
        if not tags.empty:
            parts += [
                "<h2>By tag (dataset labels)</h2><div class='wide'>",
                tags.to_html(index=False, float_format=lambda v: f"{v:.2f}", na_rep="-"),
                "</div>",
            ]
        parts += _invalid_samples(records)
        parts += [
            "<h2>Every level</h2><div class='wide'>",
            detail.to_html(index=False, float_format=lambda v: f"{v:.3f}", na_rep="-"),
            "</div>",
        ]
    parts.append("</body></html>")
    out_path.write_text("\n".join(parts), encoding="utf-8")
    return out_path


def comparison_frame(before: dict[str, Any], after: dict[str, Any]):
    """Per (scenario, level, arm) present in both runs: effective tok/s and P95 before / after, and the change."""
    a, b = summary_frame(before), summary_frame(after)
    if a.empty or b.empty:
        return a.iloc[0:0]
    keys = ["scenario", "level", "arm"]
    merged = a[[*keys, "eff tok/s", "P95 ms", "invalid JSON"]].merge(
        b[[*keys, "eff tok/s", "P95 ms", "invalid JSON"]], on=keys, suffixes=(" before", " after")
    )
    merged["eff tok/s change"] = merged["eff tok/s after"] / merged["eff tok/s before"] - 1
    merged["P95 change"] = merged["P95 ms after"] / merged["P95 ms before"] - 1
    return merged


def render_comparison(before: dict[str, Any], after: dict[str, Any], names: tuple[str, str], out_path: Path) -> Path:
    """Two runs side by side (e.g. before and after an engine upgrade), self-contained like the run page."""
    esc = html.escape
    table = comparison_frame(before, after)
    formatters = {c: (lambda v: f"{v:+.1%}") for c in ("eff tok/s change", "P95 change")}
    formatters.update({c: (lambda v: f"{v:.2%}") for c in ("invalid JSON before", "invalid JSON after")})
    facts = "".join(
        f"<li><b>{esc(name)}</b>: started {esc(str(run.get('started')))}, git {esc(str(run.get('machine', {}).get('git_commit')))}, "
        f"versions {esc(str(run.get('machine', {}).get('versions')))}</li>"
        for name, run in zip(names, (before, after), strict=True)
    )
    body = (
        table.to_html(index=False, formatters=formatters, float_format=lambda v: f"{v:.1f}", na_rep="-")
        if not table.empty
        else "<p>No (scenario, level, arm) in common.</p>"
    )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Comparison</title><style>{STYLE}</style></head><body>"
        f"<h1>Run comparison: {esc(names[0])} &rarr; {esc(names[1])}</h1><ul>{facts}</ul>{body}</body></html>"
    )
    out_path.write_text(page, encoding="utf-8")
    return out_path
