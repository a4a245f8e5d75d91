"""A run's summary table: the median over repeats per (scenario, level, arm), each arm's paired ratio to the
reference arm (``intervals.paired_ratio``), and its text form."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dspark_bench.loadtests.arms import ORACLE_ARM, REFERENCE_ARM
from dspark_bench.loadtests.results import RunResults, by_repeat, levels_frame, measurements
from dspark_bench.reports.intervals import PairedRatio, paired_ratio

SPEEDUP_COLUMN = f"x {REFERENCE_ARM}"  # effective tok/s over the reference arm's, same scenario and level
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
RATE_COLUMNS = ("invalid JSON", "truncated", "http error", "timeout", "stalled streams", "other CPU", "prefix hit", "grammar drafts", "repeat drafts")


def summary_frame(results: RunResults) -> pd.DataFrame:
    """Median over repeats per (scenario, level, arm), with each arm's effective-throughput ratio to the
    reference arm (``SPEEDUP_COLUMN``: the geometric mean of the per-repeat ratios; NaN where the run has
    no reference arm)."""
    df = levels_frame(results)
    if df.empty:
        return df
    # counters a server may lack, and measures results from before them lack (span_s)
    metrics = [c for c in SUMMARY_COLUMNS if c in df and df[c].notna().any()]
    grouped = df.groupby(["scenario", "level", "arm"], sort=True)[metrics].median().reset_index()
    if df["valid"].notna().any():  # a (scenario, level, arm) with any repeat that did not hold its load is flagged
        failed = df.groupby(["scenario", "level", "arm"], sort=True)["valid"].agg(lambda v: bool((v == False).any()))  # noqa: E712
        grouped["level ok"] = ["NO" if bad else "yes" for bad in failed.reset_index(drop=True)]
    grouped[SPEEDUP_COLUMN] = _ratio_to(df, grouped, REFERENCE_ARM)
    if ORACLE_ARM in set(grouped["arm"]):
        grouped[EFFICIENCY_COLUMN] = _ratio_to(df, grouped, ORACLE_ARM)
    return grouped.rename(columns=SUMMARY_COLUMNS)


def ratios_to(df: pd.DataFrame, against: str) -> dict[tuple[str, float, str], PairedRatio]:
    """Per (scenario, level, arm) of ``levels_frame`` rows: the arm's effective tok/s over ``against``'s at the
    same scenario and level, paired by repeat over the repeats in which both levels were measurements (a
    level that was not, ``valid`` False, pairs with nothing); absent where no such pair is left."""
    eff = {key: by_repeat(rows, "effective_tok_s") for key, rows in measurements(df).groupby(["scenario", "level", "arm"])}
    ratios = {}
    for (scenario, level, arm), mine in eff.items():
        if (paired := paired_ratio(eff.get((scenario, level, against)), mine)) is not None:
            ratios[(scenario, level, arm)] = paired
    return ratios


def _ratio_to(df: pd.DataFrame, grouped: pd.DataFrame, arm: str) -> list[float]:
    """Each row's ratio to ``arm`` (``ratios_to``), NaN where ``arm`` has none."""
    ratios = ratios_to(df, arm)
    keys = zip(grouped["scenario"], grouped["level"], grouped["arm"], strict=True)
    return [ratios[key].ratio if key in ratios else float("nan") for key in keys]


def format_summary(summary: pd.DataFrame) -> str:
    if summary.empty:
        return "(no completed levels)"
    shown = summary.copy()
    for column in RATE_COLUMNS:
        if column in shown:
            shown[column] = shown[column].map(lambda v: "-" if v != v else f"{v:.2%}")  # NaN: the arm has no such counter
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


def capacity_lines(results: RunResults) -> list[str]:
    """A --find-capacity run's verdict, a line per scenario: each arm's capacity at the SLO, its bracket,
    and each arm's capacity over the reference arm's; [] for other runs."""
    lines = []
    for scenario in dict.fromkeys(entry["scenario"] for entry in results.capacity):
        entries = [entry for entry in results.capacity if entry["scenario"] == scenario]
        first = entries[0]
        slo = ", ".join(f"{key} <= {limit:g}" for key, limit in first["slo"].items()) or "valid answers"
        lines.append(f"capacity at the SLO ({slo}; {first['share']:.0%} of requests good), {scenario}:")
        found = {entry["arm"]: entry.get("capacity_req_s") for entry in entries}
        for entry in entries:
            capacity, bracket = entry.get("capacity_req_s"), entry.get("bracket")
            if capacity is None or not bracket:
                said = f"not found ({entry.get('stopped') or 'no probe held the SLO'})"
            else:
                said = f"holds {capacity:.3g} req/s, misses at {bracket[1]:.3g}" + ("" if entry.get("resolved") else " (not resolved)")
            ratio = ""
            if capacity and found.get(REFERENCE_ARM) and entry["arm"] != REFERENCE_ARM:
                ratio = f"; {capacity / found[REFERENCE_ARM]:.2f}x {REFERENCE_ARM}"
            lines.append(f"  {entry['arm']}: {said} ({len(entry.get('probes', []))} probes){ratio}")
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
