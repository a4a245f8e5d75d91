"""A self-contained HTML page for one run: inline CSS, plots embedded as PNG data, output escaped."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dspark_bench.loadtests.arms import REFERENCE_ARM  # noqa: E402
from dspark_bench.loadtests.config import RunConfig, placement_line  # noqa: E402
from dspark_bench.loadtests.results import RunResults, levels_frame  # noqa: E402
from dspark_bench.reports.article import article_table, interval_note, load_records  # noqa: E402
from dspark_bench.reports.compare import RAW_THROUGHPUT, Comparison, build_comparison  # noqa: E402
from dspark_bench.reports.tables import SPEEDUP_COLUMN, capacity_lines, interval_text, session_lines, summary_frame, tag_frame  # noqa: E402

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#222;max-width:1200px}
table{border-collapse:collapse;font-size:.85rem;margin:1rem 0}th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}
th{background:#f3f3f3}code,pre{background:#f6f6f6;padding:.1rem .3rem;font-size:.8rem;white-space:pre-wrap;word-break:break-all}
.bad{color:#b00020}.ok{color:#1b5e20}.wide{overflow-x:auto;max-width:100%}
img{max-width:100%;height:auto}.verdict{font-size:1.05rem;line-height:1.6}
"""


def _png(fig, alt: str) -> str:
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}">'


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


GRID_PANELS = (  # (levels column, label, log scale): the grid's panels, each with a band over repeats
    ("effective_tok_s", "effective JSON tokens/s", False),
    ("speedup", "speed-up over the reference arm", False),
    ("latency_p50_ms", "P50 latency (ms)", True),
    ("latency_p95_ms", "P95 latency (ms)", True),
    ("ttft_p50_ms", "TTFT P50 (ms)", True),
    ("server:mean_acceptance_length", "mean acceptance length", False),
)


def _with_speedup(detail: pd.DataFrame, comparison: Comparison) -> pd.DataFrame:
    """Each level's effective tok/s over the reference arm's in the same scenario, level and repeat: the
    per-repeat ratios of ``comparison``; NaN where either level was not a measurement."""
    speedups = [
        found.by_repeat().get(int(repeat), float("nan")) if (found := comparison.throughput.get((scenario, level, arm))) else float("nan")
        for scenario, level, arm, repeat in zip(detail["scenario"], detail["level"], detail["arm"], detail["repeat"], strict=True)
    ]
    return detail.assign(speedup=speedups)


def _arm_colors(arms) -> dict[str, str]:
    """One color per arm, the same in every figure of the page."""
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {arm: palette[i % len(palette)] for i, arm in enumerate(sorted(set(arms)))}


def _grid(detail: pd.DataFrame, scenario: str, comparison: Comparison) -> str:
    """The run's main figures for one scenario in one grid: the median over repeats as a line, the band
    from the lowest to the highest repeat around it."""
    part = _with_speedup(detail[detail["scenario"] == scenario], comparison)
    panels = [(c, label, log) for c, label, log in GRID_PANELS if c in part and part[c].notna().any()]
    if not panels:
        return ""
    columns = 3
    rows = (len(panels) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(11, 3.1 * rows), squeeze=False)
    colors = _arm_colors(part["arm"])
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    for ax, (column, label, log) in zip(axes.flat, panels, strict=False):
        for arm, rows_of_arm in part.groupby("arm"):
            spread = rows_of_arm.groupby("level")[column].agg(["median", "min", "max"]).dropna()
            if spread.empty:
                continue
            ax.plot(spread.index, spread["median"], marker="o", markersize=3, label=arm, color=colors[arm])
            ax.fill_between(spread.index, spread["min"], spread["max"], color=colors[arm], alpha=0.2)
        ax.set_xscale("log", base=2)
        if log and (part[column] > 0).any():
            ax.set_yscale("log")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("load (users, or requests/s)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    return _png(fig, f"{scenario}: throughput, speed-up and latency against load")


def _cdf(records: pd.DataFrame, scenario: str, level: float) -> str:
    """Each arm's end-to-end latency distribution at one level (every repeat's measured requests)."""
    part = records[(records["scenario"] == scenario) & (records["level"] == level)].dropna(subset=["latency_s"])
    if part.empty:
        return ""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    colors = _arm_colors(records["arm"])
    for arm, rows in part.groupby("arm"):
        values = np.sort(rows["latency_s"].to_numpy() * 1000)
        ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=arm, color=colors[arm])
    ax.set_xlabel("end-to-end latency (ms)")
    ax.set_ylabel("share of requests")
    ax.set_title(f"{scenario}, load {level:g}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig, f"latency distribution at load {level:g}")


def _timeline(all_records: pd.DataFrame, scenario: str) -> str:
    """Requests in flight over each level's time (first repeat, warm-up included): a closed loop holds a
    flat line at its users; dips are a load generator that fell behind, or stalls."""
    part = all_records[(all_records["scenario"] == scenario) & (all_records["repeat"] == 0)].dropna(subset=["t_last_byte"])
    levels = sorted(part["level"].unique())
    if not levels:
        return ""
    columns = min(4, len(levels))
    rows = (len(levels) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(11, 2.4 * rows), squeeze=False)
    for ax in axes.flat[len(levels) :]:
        ax.axis("off")
    colors = _arm_colors(all_records["arm"])
    for ax, level in zip(axes.flat, levels, strict=False):
        for arm, rows_of_arm in part[part["level"] == level].groupby("arm"):
            start = rows_of_arm["t_send"].min()
            events = sorted([(t - start, 1) for t in rows_of_arm["t_send"]] + [(t - start, -1) for t in rows_of_arm["t_last_byte"]])
            times, counts, current = [0.0], [0], 0
            for at, change in events:
                current += change
                times.append(at)
                counts.append(current)
            ax.step(times, counts, where="post", label=arm, linewidth=1, color=colors[arm])
        ax.axhline(level, color="grey", linewidth=0.6, linestyle="--")
        ax.set_title(f"load {level:g}", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("s since the level's first request", fontsize=7)
    axes.flat[0].legend(fontsize=6)
    return _png(fig, f"{scenario}: requests in flight over time per level")


def _machine_panel(results: RunResults, detail: pd.DataFrame) -> list[str]:
    """What the numbers were measured on, and what else ran beside them, per level."""
    esc = html.escape
    machine = results.machine
    parts = [
        "<h2>Machine and noise</h2>",
        f"<p>{esc(machine.summary)}; CPU features {esc(', '.join(machine.cpu_flags or ()) or 'not recorded')}; "
        f"GPU {esc(str(machine.gpu))}; git {esc(str(machine.git_commit))}.</p>",
    ]
    columns = ["other_cpu_share", "steal_share", "client_cpu_share", "client_wait_share", "api_server_wait_share",
               "achieved_concurrency", "valid"]
    if detail[columns[:3]].notna().any().any():  # runs from before the noise was measured have none
        noise = detail.groupby(["scenario", "level", "arm"])[columns].agg(
            {c: ((lambda v: not (v == False).any()) if c == "valid" else "max") for c in columns}  # noqa: E712
        )
        noise = noise.reset_index().rename(
            columns={"other_cpu_share": "other processes (max)", "steal_share": "steal (max)",
                     "client_cpu_share": "load generator CPU (max)", "client_wait_share": "load generator waited (max)",
                     "api_server_wait_share": "API server waited (max)", "achieved_concurrency": "achieved load (max)",
                     "valid": "measured cleanly"}  # fmt: skip
        )
        parts += [
            "<p>Per level, worst repeat: CPU share of processes other than the servers and the harness, hypervisor "
            "steal, the load generator's own CPU (of one core), and the seconds per second that the load generator's "
            "and the API server's threads were ready to run but waited for a CPU (starved above 0.20). Above 10% other "
            "CPU, or with a starved load generator, a level is not a measurement.</p>",
            "<div class='wide'>",
            noise.to_html(index=False, float_format=lambda v: f"{v:.2f}", na_rep="-"),
            "</div>",
        ]
    return parts


def _requests_per_level(results: RunResults) -> str:
    """The measured requests each level ran (closed loops are raised to a steady number of waves)."""
    counts: dict[float, int] = {}
    for row in results.levels:
        counts.setdefault(row.level, row.metrics.requests)
    if not counts:
        return f"{results.config.requests_per_level} requests per level"
    if len(set(counts.values())) == 1:
        return f"{next(iter(counts.values()))} requests per level"
    return "requests per level " + ", ".join(f"{level:g}: {count}" for level, count in sorted(counts.items()))


def _cache_state(results: RunResults) -> str:
    """Whether every level started with every arm's prefix cache empty (runs before the reset existed: unknown)."""
    states = {row.arm: row.health.prefix_cache_reset for row in results.levels}
    if not states or all(state is None for state in states.values()):
        return "prefix-cache state at each level's start not recorded"
    kept = sorted(arm for arm, state in states.items() if not state)
    if not kept:
        return "every arm's prefix cache emptied before every level"
    return f"prefix caches emptied before every level, except {', '.join(kept)} (no /reset_prefix_cache)"


def _verdicts(summary: pd.DataFrame, comparison: Comparison) -> list[str]:
    """One sentence per arm against the reference arm: its ratio and interval at the lowest load (both the
    ``Comparison``'s, as the summary's), then where it stops gaining; where answers were cut at max_tokens it
    says so, and gives the ratio over the answers that finished."""
    esc = html.escape
    if summary.empty or SPEEDUP_COLUMN not in summary or REFERENCE_ARM not in set(summary["arm"]):
        return []
    lines = []
    for scenario, part in summary.groupby("scenario"):
        for arm, rows in part.groupby("arm"):
            if arm == REFERENCE_ARM:
                continue
            rows = rows.sort_values("level")
            first = rows.iloc[0]
            paired = comparison.throughput.get((scenario, first["level"], arm))
            interval = f" ({interval_text(paired)})" if paired is not None and paired.interval else ""
            load = "user" if first["level"] == 1 else "users"
            sentence = f"{arm}: {first[SPEEDUP_COLUMN]:.2f}x{interval} at {first['level']:g} {load}"
            losing = rows[rows[SPEEDUP_COLUMN] < 1.0]
            if not losing.empty:
                sentence += f"; below 1.0x at {', '.join(f'{v:g}' for v in losing['level'])}"
            sentence += f"; {rows.iloc[-1][SPEEDUP_COLUMN]:.2f}x at {rows.iloc[-1]['level']:g}"
            said = {level: comparison.warnings.get((scenario, level, arm)) or comparison.warnings.get((scenario, level, REFERENCE_ARM))
                    for level in rows["level"]}  # fmt: skip
            cut_warnings = {level: warnings for level, warnings in said.items() if warnings}
            cut = list(cut_warnings)
            warning = ""
            if cut:
                finished = [
                    f"{found.ratio:.2f}x at {level:g}" for level in cut if (found := comparison.finished.get((scenario, level, arm))) is not None
                ]
                warning = (
                    f" <b class='bad'>Not a speed-up of served answers at {esc(', '.join(f'{v:g}' for v in cut))}:</b> "
                    f"{esc(cut_warnings[cut[0]][0])}. Over the answers that finished in both arms: {esc(', '.join(finished) or 'none finished')}."
                )
            lines.append(f"<li><b>{esc(str(scenario))}</b>, {esc(sentence)}{warning}</li>")
    if comparison.metric == RAW_THROUGHPUT:
        heading = ("raw output throughput: a cost-only run, the model's weights are vLLM's dummy ones, so answers are noise "
                   "and validity is not reported; each step costs what the shape's does")  # fmt: skip
    else:
        heading = "effective JSON throughput"
    return [f"<h2>Verdict against {esc(REFERENCE_ARM)} ({esc(heading)})</h2><ul class='verdict'>{''.join(lines)}</ul>"]


def _capacity(results: RunResults) -> list[str]:
    """A --find-capacity run: the verdict lines, then every probe of every arm."""
    lines = capacity_lines(results)
    if not lines:
        return []
    rows = [
        {"scenario": search.scenario, "arm": search.arm, "probe": index + 1, "req/s": probe.rate,
         "good": f"{probe.good_share:.0%}", "holds the SLO": "yes" if probe.passed else "no",
         "measurement": "yes" if probe.valid else "; ".join(probe.problems)}  # fmt: skip
        for search in results.capacity
        for index, probe in enumerate(search.probes)
    ]
    verdict = "<br>".join(html.escape(line) for line in lines)
    return ["<h2>Capacity at the SLO</h2>", f"<p>{verdict}</p>", pd.DataFrame(rows).to_html(index=False)]


def _sessions(results: RunResults) -> list[str]:
    """An agent-session run: success, turns and the prefix cache's share of each turn's prompt."""
    if not (lines := session_lines(results)):
        return []
    return ["<h2>Agent sessions</h2>", "<p>" + "<br>".join(html.escape(line) for line in lines) + "</p>"]


def _shape_note(config: RunConfig) -> str:
    return f" (a {config.model_shape}-shaped model with vLLM's dummy weights: cost-only)" if config.cost_only else ""


def render_html(results: RunResults, out_path: Path, history: Sequence[str] = ()) -> Path:
    """The run's page; ``history``: its history panel (``reports.history.history_panel``), when a store had one."""
    records = load_records(out_path.parent)
    comparison = build_comparison(results, records)
    summary = summary_frame(results, comparison=comparison)
    esc = html.escape
    status = '<span class="ok">complete</span>' if results.complete else f'<span class="bad">INCOMPLETE: {esc(str(results.error))}</span>'
    config, machine = results.config, results.machine
    arms = "".join(
        f"<li><b>{esc(name)}</b> ({esc(info.mode)}): {esc(info.description)}<br>"
        f"<code>{esc(' '.join(info.argv or [info.base_url]))}</code>"
        + (f"<br>engine, as its log says: {esc(engine)}" if (engine := info.engine.summary()) else "")
        + "</li>"
        for name, info in results.arms.items()
    )
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>JSON benchmark {esc(results.started)}</title>",
        f"<style>{STYLE}</style></head><body><h1>JSON serving benchmark</h1><p>Status: {status}</p>",
        f"<p>Model <code>{esc(config.model)}</code>{esc(_shape_note(config))}; scenarios {esc(', '.join(config.scenarios))}; "
        f"{esc(_requests_per_level(results))} (+{config.warmup_requests} warm-up each); {esc(_cache_state(results))}; "
        f"max_tokens {config.max_tokens}, temperature {config.temperature}; started {esc(results.started)}.</p>",
        f"<p>Machine: {esc(machine.summary)}, GPU {esc(str(machine.gpu))}; "
        f"git {esc(str(machine.git_commit))}; versions {esc(str(machine.versions))}; "
        f"{esc(placement_line(config) or 'placement: every process on any CPU')}.</p>",
        f"<h2>Arms</h2><ul>{arms}</ul>",
    ]
    all_records = load_records(out_path.parent, include_warmup=True)
    detail = levels_frame(results)
    parts[2:2] = [*_verdicts(summary, comparison), *_sessions(results), *_capacity(results), *history]
    # scenario names as the levels record them (a dataset's name is its file's stem, not the path given)
    for scenario in sorted({level.scenario for level in results.levels}):
        for base in ("baseline", "baseline-constrained"):
            table = article_table(records, results, scenario, base=base, treat="dspark")
            if not table.empty:
                parts += [
                    f"<h2>The article's table: {esc(scenario)}, dspark against {esc(base)}</h2>",
                    table.to_html(index=False, na_rep="-"),
                    f"<p>{esc(interval_note(records))}</p>",
                ]
    if not summary.empty:
        for scenario in sorted(set(detail["scenario"])):
            levels = sorted(set(detail[detail["scenario"] == scenario]["level"]))
            cdf_level = 8 if 8 in levels else levels[len(levels) // 2]
            parts += [
                f"<h2>{esc(scenario)}: throughput and latency against load</h2>",
                _grid(detail, scenario, comparison),
                f"<h2>Latency distribution at load {cdf_level:g}</h2>",
                _cdf(records, scenario, cdf_level) if not records.empty else "",
                "<h2>Requests in flight over time</h2>",
                _timeline(all_records, scenario) if not all_records.empty else "",
            ]
        parts += [
            "<h2>Summary (median over repeats)</h2><div class='wide'>",
            summary.to_html(index=False, float_format=lambda v: f"{v:.2f}", na_rep="-"),
            "</div>",
            _invalid_stacked(detail),
        ]
        parts += _machine_panel(results, detail)
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


def comparison_frame(before: RunResults, after: RunResults) -> pd.DataFrame:
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


def render_comparison(before: RunResults, after: RunResults, names: tuple[str, str], out_path: Path) -> Path:
    """Two runs side by side (e.g. before and after an engine upgrade), self-contained like the run page."""
    esc = html.escape
    table = comparison_frame(before, after)
    formatters = {c: (lambda v: f"{v:+.1%}") for c in ("eff tok/s change", "P95 change")}
    formatters.update({c: (lambda v: f"{v:.2%}") for c in ("invalid JSON before", "invalid JSON after")})
    facts = "".join(
        f"<li><b>{esc(name)}</b>: started {esc(run.started)}, git {esc(str(run.machine.git_commit))}, "
        f"versions {esc(str(run.machine.versions))}</li>"
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
