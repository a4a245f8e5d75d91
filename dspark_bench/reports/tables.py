"""A run's summary table: the median over repeats per (scenario, level, arm), each arm's paired ratio to the
reference arm (``intervals.paired_ratio``), and its text form."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dspark_bench.loadtests.arms import ORACLE_ARM, REFERENCE_ARM
from dspark_bench.loadtests.results import RunResults, levels_frame
from dspark_bench.reports.compare import RAW_THROUGHPUT, Comparison, Key, build_comparison, capacity_ratios
from dspark_bench.reports.intervals import PairedRatio

SPEEDUP_COLUMN = f"x {REFERENCE_ARM}"  # effective (cost-only: raw) tok/s over the reference arm's, same scenario and level
INTERVAL_COLUMN = "95% interval"  # ... its interval
FINISHED_COLUMN = "x finished"  # the speed over answers that ended on their own in both arms (compare.finished_speeds)
WARNING_COLUMN = "warn"
EFFICIENCY_COLUMN = f"share of {ORACLE_ARM}"  # speculation efficiency: effective tok/s over the ceiling's
SUMMARY_COLUMNS = {
    "effective_tok_s": "eff tok/s",
    "raw_tok_s": "raw tok/s",
    "requests_per_s": "req/s",
    "latency_p50_ms": "P50 ms",
    "latency_p95_ms": "P95 ms",
    "ttft_p50_ms": "TTFT P50 ms",
    "tpot_median_ms": "TPOT ms",
    "itl_p95_ms": "ITL P95 ms",
    "goodput_req_s": "good req/s",
    "good_tok_s": "good tok/s",
    "invalid_json_rate": "invalid JSON",
    "rate_truncated": "truncated",
    "rate_http_error": "http error",
    "rate_timeout": "timeout",
    "stalled_stream_rate": "stalled streams",
    "achieved_concurrency": "achieved conc",
    "server:prefix_cache_hit_rate": "prefix hit",
    "server:grammar_draft_share": "grammar drafts",
    "server:repeat_draft_share": "repeat drafts",
    "other_cpu_share": "other CPU",
    "span_s": "span s",  # what the throughputs are over; the wall time beside it
    "wall_s": "wall s",
}
VALIDITY_COLUMNS = ("effective_tok_s", "invalid_json_rate", "goodput_req_s", "good_tok_s")
RATE_COLUMNS = ("invalid JSON", "truncated", "http error", "timeout", "stalled streams", "other CPU", "prefix hit", "grammar drafts", "repeat drafts")


def _rounds_ok(valid: pd.Series) -> str:
    """A level's rounds as the summary shows them: yes (every one a measurement), NO (none), or 3/4 (how many
    were, where the machine disturbed some and the sweep measured the level again). Pure."""
    measured = int((valid != False).sum())  # noqa: E712 - None: a run before the checks
    return "yes" if measured == len(valid) else "NO" if measured == 0 else f"{measured}/{len(valid)}"


def summary_frame(results: RunResults, records: pd.DataFrame | None = None, comparison: Comparison | None = None) -> pd.DataFrame:
    """Median over repeats per (scenario, level, arm), with each arm's effective-throughput ratio to the
    reference arm (``SPEEDUP_COLUMN`` and its interval, from ``comparison``; NaN where the run has no
    reference arm), the ratio over finished answers where ``records`` are given, and a mark where the level
    has warnings (``metrics.level_warnings``)."""
    df = levels_frame(results)
    if df.empty:
        return df
    comparison = comparison or build_comparison(results, records)
    # counters a server may lack, and measures results from before them lack (span_s)
    metrics = [c for c in SUMMARY_COLUMNS if c in df and df[c].notna().any()]
    if comparison.metric == RAW_THROUGHPUT:  # a cost-only run: no answer of dummy weights is worth validating
        metrics = [c for c in metrics if c not in VALIDITY_COLUMNS]
    grouped = df.groupby(["scenario", "level", "arm"], sort=True)[metrics].median().reset_index()
    if df["valid"].notna().any():  # a (scenario, level, arm) with a repeat that was not a measurement is flagged
        ok = df.groupby(["scenario", "level", "arm"], sort=True)["valid"].agg(_rounds_ok)
        grouped["level ok"] = list(ok.reset_index(drop=True))
    keys = list(zip(grouped["scenario"], grouped["level"], grouped["arm"], strict=True))
    grouped[SPEEDUP_COLUMN] = _column(comparison.throughput, keys)
    grouped[INTERVAL_COLUMN] = [interval_text(comparison.throughput.get(key)) for key in keys]
    if comparison.finished:
        grouped[FINISHED_COLUMN] = _column(comparison.finished, keys)
    if ORACLE_ARM in set(grouped["arm"]):
        grouped[EFFICIENCY_COLUMN] = _column(comparison.oracle, keys)
    grouped[WARNING_COLUMN] = ["CUT" if comparison.warnings.get(key) else "" for key in keys]
    return grouped.rename(columns=SUMMARY_COLUMNS)


def interval_text(paired: PairedRatio | None) -> str:
    return "" if paired is None or paired.interval is None else f"{paired.interval[0]:.2f}-{paired.interval[1]:.2f}"


def _column(found: dict[Key, PairedRatio], keys: list[Key]) -> list[float]:
    return [found[key].ratio if key in found else float("nan") for key in keys]


def warning_lines(comparison: Comparison) -> list[str]:
    """One line per (scenario, level, arm) with warnings, for the summary's foot."""
    return [
        f"warning: {scenario} at {level:g}, {arm}: {'; '.join(said)}" for (scenario, level, arm), said in sorted(comparison.warnings.items())
    ]


def agreement_lines(comparison: Comparison, temperature: float) -> list[str]:
    """At temperature 0, one line: each arm's answers equal to the reference arm's for the same prompt, over
    every level (``compare.answer_agreement``): a lossless arm's are all equal, up to floating-point near-ties.
    [] at other temperatures, or where no answers pair."""
    if temperature != 0 or not comparison.agreement:
        return []
    totals: dict[str, list[int]] = {}
    for (_scenario, _level, arm), (equal, paired) in sorted(comparison.agreement.items()):
        total = totals.setdefault(arm, [0, 0])
        total[0] += equal
        total[1] += paired
    arms = ", ".join(f"{arm} {equal:,}/{paired:,}" for arm, (equal, paired) in totals.items())
    return [f"answers equal to {REFERENCE_ARM}'s, same prompt (temperature 0): {arms}"]


# What the printed summary shows, to fit a 120-column terminal; the run folder's summary.txt has every column.
COMPACT_COLUMNS = (
    "scenario", "level", "arm", "eff tok/s", "P95 ms", "truncated", "repeat drafts", "grammar drafts", "level ok",
    SPEEDUP_COLUMN, INTERVAL_COLUMN, FINISHED_COLUMN, WARNING_COLUMN,
)  # fmt: skip


def format_summary(summary: pd.DataFrame, compact: bool = False) -> str:
    """The summary as text: every column, or (``compact``) ``COMPACT_COLUMNS`` with short rates."""
    if summary.empty:
        return "(no completed levels)"
    # a cost-only run's summary has raw throughput where others have effective (summary_frame)
    wanted = COMPACT_COLUMNS if "eff tok/s" in summary else tuple("raw tok/s" if c == "eff tok/s" else c for c in COMPACT_COLUMNS)
    shown = summary[[c for c in wanted if c in summary]].copy() if compact else summary.copy()
    if compact:
        shown = shown.rename(columns={SPEEDUP_COLUMN: "x ref", INTERVAL_COLUMN: "95%", "grammar drafts": "grammar", "repeat drafts": "repeat"})
        shown["scenario"] = shown["scenario"].map(lambda name: name if len(name) <= 24 else name[:23] + "~")
    for column in (*RATE_COLUMNS, "grammar", "repeat"):
        if column in shown:
            fmt = "{:.0%}" if compact else "{:.2%}"
            shown[column] = shown[column].map(lambda v, fmt=fmt: "-" if v != v else fmt.format(v))  # NaN: no such counter
    return shown.to_string(index=False, float_format=lambda v: f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}")


def tag_frame(records: pd.DataFrame) -> pd.DataFrame:
    """Per (tag, arm) of a dataset run's measured records: requests, valid share, field accuracy, latency.
    A request with several tags counts under each; empty when no record has tags."""
    if records.empty or "tags" not in records or records["tags"].isna().all():
        return pd.DataFrame()
    tagged = records.dropna(subset=["tags"]).explode("tags").rename(columns={"tags": "tag"})
    if tagged.empty:
        return pd.DataFrame()
    grouped = tagged.groupby(["tag", "arm"], sort=True)
    return pd.DataFrame(
        {
            "requests": grouped.size(),
            "valid": grouped["verdict"].apply(lambda v: (v == "valid").mean()),
            "field accuracy": grouped["field_accuracy"].mean(),
            "P50 ms": grouped["latency_s"].median() * 1000,
            "P95 ms": grouped["latency_s"].quantile(0.95) * 1000,
            "output tokens": grouped["output_tokens"].mean(),
        }
    ).reset_index()


def engine_lines(results: RunResults) -> list[str]:
    """How each arm's server says it ran (its log: model runner, CUDA graphs, attention, asynchronous scheduling),
    a line per arm whose server this run started; [] where none did."""
    said = {name: facts.engine.summary() for name, facts in results.arms.items()}
    if not any(said.values()):
        return []
    return ["engine, as each server's log says:", *(f"  {name}: {line}" for name, line in said.items() if line)]


def capacity_lines(results: RunResults) -> list[str]:
    """A --find-capacity run's verdict, a line per scenario: each arm's capacity at the SLO, its bracket,
    and each arm's capacity over the reference arm's (``compare.capacity_ratios``); [] for other runs."""
    lines = []
    ratios = capacity_ratios(results)
    for scenario in dict.fromkeys(search.scenario for search in results.capacity):
        searches = [search for search in results.capacity if search.scenario == scenario]
        first = searches[0]
        slo = ", ".join(f"{key} <= {limit:g}" for key, limit in first.slo.items()) or "valid answers"
        lines.append(f"capacity at the SLO ({slo}; {first.share:.0%} of requests good), {scenario}:")
        for search in searches:
            capacity, bracket = search.capacity_req_s, search.bracket
            if capacity is None or not bracket:
                said = f"not found ({search.stopped or 'no probe held the SLO'})"
            else:
                said = f"holds {capacity:.3g} req/s, misses at {bracket[1]:.3g}" + ("" if search.resolved else " (not resolved)")
            paired = ratios.get((scenario, search.arm))
            ratio = f"; {paired.ratio:.2f}x {REFERENCE_ARM}" if paired is not None else ""
            lines.append(f"  {search.arm}: {said} ({len(search.probes)} probes){ratio}")
    return lines


def session_lines(results: RunResults) -> list[str]:
    """An agent-session run's figures, a line per (scenario, level, arm), medians over repeats: sessions,
    the share that succeeded (every turn valid), turns per session, and the share of each turn's prompt
    tokens the server found in its prefix cache; [] for runs without sessions."""
    groups: dict[tuple[str, float, str], list] = {}
    for level in results.levels:
        if level.metrics.sessions:
            groups.setdefault((level.scenario, level.level, level.arm), []).append(level.metrics)
    if not groups:
        return []
    unit = "req/s" if results.config.rates else "users"
    lines = ["agent sessions (median over repeats): sessions, success (every turn valid), turns per session, prompt cached by turn:"]
    for (scenario, load, arm), metrics in groups.items():
        shares = [m.cached_prompt_share_by_turn or [] for m in metrics]
        by_turn = [[s[n] for s in shares if n < len(s) and s[n] is not None] for n in range(max(map(len, shares)))]
        cached = ", ".join(f"turn {n + 1} {float(np.median(shares)):.0%}" for n, shares in enumerate(by_turn) if shares)
        lines.append(
            f"  {scenario} at {load:g} {unit}, {arm}: {np.median([m.sessions for m in metrics]):g} sessions, "
            f"{np.median([m.session_success_rate for m in metrics]):.0%} succeeded, "
            f"{np.median([m.turns_per_session for m in metrics]):.2f} turns each; cached: {cached or 'the server did not say'}"
        )
    return lines
