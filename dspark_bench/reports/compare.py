"""How the arms of a run compare: built once from ``RunResults`` (and, for the finished-answer speed, the
run's records), read by the summary, the verdict, the article table and the history.

Every ratio between arms is ``intervals.paired_ratio`` over the repeats in which both arms' levels were
measurements (``results.measurements``), of a column of ``levels_frame``: the figure the summary prints for
an arm and level is the one the verdict and the article table print.

The finished-answer speed: the same prompts go to every arm of a repeat, so per (scenario, level, repeat)
the prompts that ended on their own (``finish_reason`` stop) in both arms are the same requests, answered
alike by a lossless arm. Their output tokens over their summed latency is each arm's speed on answers that
finished; its ratio is the speed-up a reader can trust where many answers ran to max_tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import median

import pandas as pd

from dspark_bench.loadtests.arms import ORACLE_ARM, REFERENCE_ARM
from dspark_bench.loadtests.metrics import LevelMetrics, level_warnings
from dspark_bench.loadtests.results import RunResults, by_repeat, levels_frame, measurements
from dspark_bench.reports.intervals import PairedRatio, paired_ratio

Key = tuple[str, float, str]  # (scenario, level, arm)
THROUGHPUT = "effective_tok_s"
RAW_THROUGHPUT = "raw_tok_s"  # a cost-only run's (dummy weights: no answer is worth validating)
P95 = "latency_p95_ms"
WALL = "wall_s"  # a level's whole time: the article's "1000 requests at concurrency 64, total (s)"
FINISHED_REASON = "stop"


def ratios(frame: pd.DataFrame, against: str, column: str = THROUGHPUT) -> dict[Key, PairedRatio]:
    """Per (scenario, level, arm) of ``levels_frame`` rows: the arm's ``column`` over ``against``'s at the same
    scenario and level, paired by repeat over the repeats in which both levels were measurements; absent
    where no such pair is left. The one place one arm's figure is divided by another's."""
    if frame.empty:
        return {}
    values = {key: by_repeat(rows, column) for key, rows in measurements(frame).groupby(["scenario", "level", "arm"])}
    found = {}
    for (scenario, level, arm), mine in values.items():
        if (paired := paired_ratio(values.get((scenario, level, against)), mine)) is not None:
            found[(scenario, level, arm)] = paired
    return found


def capacity_ratios(results: RunResults, against: str = REFERENCE_ARM) -> dict[tuple[str, str], PairedRatio]:
    """Per (scenario, arm) of a --find-capacity run: the arm's capacity at the SLO over ``against``'s (one search
    each, so no interval); absent where either found none."""
    found = {(search.scenario, search.arm): search.capacity_req_s for search in results.capacity if search.capacity_req_s}
    ratios = {}
    for (scenario, arm), capacity in found.items():
        reference = found.get((scenario, against))
        if arm != against and reference and (paired := paired_ratio({0: reference}, {0: capacity})) is not None:
            ratios[(scenario, arm)] = paired
    return ratios


def finished_speeds(records: pd.DataFrame, valid: set[tuple[str, float, str, int]] | None = None) -> dict[Key, dict[int, float]]:
    """Per (scenario, level, arm), by repeat: output tokens per second of latency over the prompts whose answer
    ended on its own in this arm and in the reference arm (the same requests in both). ``valid``: the
    (scenario, level, arm, repeat) levels that were measurements; others are left out."""
    if records.empty or "finish_reason" not in records:
        return {}
    done = records[(records["finish_reason"] == FINISHED_REASON) & records["latency_s"].notna()]
    speeds: dict[Key, dict[int, float]] = {}
    for (scenario, level, repeat), part in done.groupby(["scenario", "level", "repeat"]):
        seeds = {arm: set(rows["seed"]) for arm, rows in part.groupby("arm")}
        if REFERENCE_ARM not in seeds:
            continue
        for arm, rows in part.groupby("arm"):
            if valid is not None and (scenario, level, arm, int(repeat)) not in valid:
                continue
            shared = rows[rows["seed"].isin(seeds[arm] & seeds[REFERENCE_ARM])]
            seconds = float(shared["latency_s"].sum())
            if seconds > 0:
                speeds.setdefault((scenario, level, arm), {})[int(repeat)] = (
                    float(shared["output_tokens"].fillna(0).sum()) / seconds
                )
    return speeds


def answer_agreement(records: pd.DataFrame, against: str = REFERENCE_ARM) -> dict[Key, tuple[int, int]]:
    """Per (scenario, level, arm) other than ``against``: (answers equal to ``against``'s, answers paired), pairing
    the same prompt (repeat, seed) answered without error by both. At temperature 0 a lossless arm's are all
    equal, up to floating-point near-ties (``studies.equality`` tells those apart)."""
    if records.empty or "output" not in records:
        return {}
    answered = records[records["error"].isna() & (records["status"] == 200)] if "status" in records else records
    answered = answered.dropna(subset=[c for c in ("repeat", "seed") if c in answered])  # a record that names no prompt pairs with none
    if not {"repeat", "seed"} <= set(answered):
        return {}
    found: dict[Key, tuple[int, int]] = {}
    for (scenario, level), part in answered.groupby(["scenario", "level"]):
        reference = {(int(r.repeat), int(r.seed)): r.output for r in part[part["arm"] == against].itertuples()}
        for arm, rows in part[part["arm"] != against].groupby("arm"):
            pairs = [(reference[key], r.output) for r in rows.itertuples() if (key := (int(r.repeat), int(r.seed))) in reference]
            if pairs:
                found[(str(scenario), float(level), str(arm))] = (sum(a == b for a, b in pairs), len(pairs))
    return found


@dataclass(frozen=True)
class Comparison:
    """Every comparison between a run's arms, per (scenario, level, arm): ratios to the reference arm (throughput,
    P95, finished-answer speed) and to the oracle arm, and the warnings of any of the arm's repeats there."""

    throughput: dict[Key, PairedRatio] = field(default_factory=dict)
    p95: dict[Key, PairedRatio] = field(default_factory=dict)
    oracle: dict[Key, PairedRatio] = field(default_factory=dict)
    finished: dict[Key, PairedRatio] = field(default_factory=dict)
    warnings: dict[Key, tuple[str, ...]] = field(default_factory=dict)
    agreement: dict[Key, tuple[int, int]] = field(default_factory=dict)  # answer_agreement with the reference arm
    metric: str = THROUGHPUT  # the column ``throughput`` divides: effective tok/s, or raw in a cost-only run

    def ratio(self, key: Key) -> float | None:
        found = self.throughput.get(key)
        return None if found is None else found.ratio


def level_warning_map(
    levels: Iterable[tuple[Key, LevelMetrics, tuple[str, ...]]], cost_only: bool = False
) -> dict[Key, tuple[str, ...]]:
    """The warnings of each (scenario, level, arm): those of its repeat with the most answers cut (stored, or
    those its metrics call for in runs from before they were stored), which say so where the level has several
    repeats, beside the median the summary's table shows; absent where no repeat has any."""
    worst: dict[Key, tuple[float, tuple[str, ...]]] = {}
    cut: dict[Key, list[float]] = {}
    for key, metrics, stored in levels:
        cut.setdefault(key, []).append(metrics.rate_truncated or 0.0)
        said = stored or level_warnings(metrics, cost_only)
        if said and (key not in worst or metrics.rate_truncated > worst[key][0]):
            worst[key] = (metrics.rate_truncated, said)
    return {
        key: said if len(cut[key]) == 1 else (*said, f"in the worst of its {len(cut[key])} repeats (cut: median {median(cut[key]):.0%})")
        for key, (_rate, said) in worst.items()
    }


def throughput_metric(results: RunResults) -> str:
    """What a run's speed-ups divide: effective JSON tok/s, or raw output tok/s where the model's weights are
    dummies (``RunConfig.cost_only``: answers are noise, so none is valid but every token cost a step)."""
    return RAW_THROUGHPUT if results.config.cost_only else THROUGHPUT


def build_comparison(results: RunResults, records: pd.DataFrame | None = None) -> Comparison:
    frame = levels_frame(results)
    metric = throughput_metric(results)
    finished: dict[Key, PairedRatio] = {}
    agreement: dict[Key, tuple[int, int]] = {}
    if records is not None and not records.empty:
        agreement = answer_agreement(records)
        valid = {(row.scenario, row.level, row.arm, int(row.repeat)) for row in measurements(frame).itertuples()}
        speeds = finished_speeds(records, valid)
        for (scenario, level, arm), mine in speeds.items():
            if (paired := paired_ratio(speeds.get((scenario, level, REFERENCE_ARM)), mine)) is not None:
                finished[(scenario, level, arm)] = paired
    warned = level_warning_map(
        (((lv.scenario, lv.level, lv.arm), lv.metrics, lv.health.warnings) for lv in results.levels), results.config.cost_only
    )
    return Comparison(
        throughput=ratios(frame, REFERENCE_ARM, metric),
        p95=ratios(frame, REFERENCE_ARM, P95),
        oracle=ratios(frame, ORACLE_ARM, metric),
        finished=finished,
        warnings=warned,
        agreement=agreement,
        metric=metric,
    )
