"""The source article's comparison table, per scenario, with 95% confidence intervals.

| metric | baseline | DSpark | change (95% CI) |, built from the per-request records of one run:
- effective JSON throughput at concurrency 1 and at the highest level: output tokens of valid
  responses per second. With several repeats the change is the geometric mean of the per-repeat
  ratios with a Student-t interval on their logs (``intervals.paired_ratio``, the estimator of the
  summary and the verdict too). With one, the CI resamples requests and estimates throughput by
  Little's law for a closed loop (concurrency x valid tokens / summed latency), which needs no wall
  clock per resample;
- P95 latency at concurrency 1 (the article's "single-request P95"): with several repeats, the paired
  per-repeat ratio of the two arms' P95s, as for throughput; with one, a bootstrap over requests;
- total time of the highest level (the article's "1000 requests at concurrency 64");
- invalid JSON rate over all levels (truncation counted apart, as the harness does).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from dspark_bench.loadtests.metrics import closed_loop_tok_s, percentile_ms, percentile_ms_rows
from dspark_bench.loadtests.records import read_records
from dspark_bench.loadtests.results import RunResults
from dspark_bench.loadtests.validate import INVALID_JSON, Verdict
from dspark_bench.reports.intervals import paired_ratio

RESAMPLES = 1000


def load_records(run_dir: Path, include_warmup: bool = False) -> pd.DataFrame:
    """A run's measured records (and the warm-up ones, if asked) as a table, with each request's latency
    and valid tokens."""
    df = pd.DataFrame([asdict(r) for r in read_records(Path(run_dir))])
    if df.empty:
        return df
    if not include_warmup:
        df = df[~df["warmup"].astype(bool)]
    df = df.copy()
    df["repeat"] = df["repeat"].fillna(0).astype(int)
    df["latency_s"] = df["t_last_byte"] - df["t_send"]
    df["valid_tokens"] = np.where(df["verdict"] == Verdict.VALID.value, df["output_tokens"].fillna(0), 0)
    return df


def _group_statistics(df: pd.DataFrame, statistic, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Per repeat of one arm: the statistic over RESAMPLES request resamples (rows), and over all its requests."""
    resampled, whole = [], []
    for _, group in df.groupby("repeat", sort=True):
        n = len(group)
        resampled.append(statistic(group, rng.integers(0, n, size=(RESAMPLES, n))))
        whole.append(float(statistic(group, np.arange(n)[None])[0]))
    return np.asarray(resampled), np.asarray(whole)


def bootstrap_ratio(
    a: pd.DataFrame, b: pd.DataFrame, statistic, rng: np.random.Generator, point: float | None = None
) -> tuple[float, float]:
    """2.5th and 97.5th percentiles of statistic(b) / statistic(a), by a hierarchical bootstrap: each
    resample draws the repeats (with replacement), then the requests within each drawn repeat, and
    averages the statistic over the drawn repeats. Run-to-run drift between repeats widens the interval;
    with one repeat it covers request-to-request variation only.

    With ``point`` (the ratio measured another way, e.g. from wall time) the interval is scaled to
    sit around it: the bootstrap gives the spread, the measurement gives the centre.
    """

    def draws(df: pd.DataFrame) -> tuple[np.ndarray, float]:
        if "repeat" not in df:
            df = df.assign(repeat=0)
        per_repeat, whole = _group_statistics(df, statistic, rng)
        repeats = len(whole)
        chosen = rng.integers(0, repeats, size=(RESAMPLES, repeats))
        column = rng.integers(0, RESAMPLES, size=(RESAMPLES, repeats))
        return per_repeat[chosen, column].mean(axis=1), float(whole.mean())

    draws_a, whole_a = draws(a)
    draws_b, whole_b = draws(b)
    low, high = np.nanpercentile(draws_b / draws_a, [2.5, 97.5])
    if point is not None and whole_a and whole_b:
        scale = point / (whole_b / whole_a)
        low, high = low * scale, high * scale
    return float(low), float(high)


def interval_note(records: pd.DataFrame) -> str:
    """What the table's intervals cover, in words for the page."""
    fewest, most = repeat_range(records)
    if fewest > 1:
        counted = str(most) if fewest == most else f"{fewest} to {most} (by level)"
        return (f"Throughput, P95 and total-time changes: the geometric mean of the {counted} per-repeat ratios (the "
                "arms ran side by side in each repeat) with a Student-t 95% interval on their logs, so drift between "
                "repeats widens it, and so do few repeats.")  # fmt: skip
    return ("95% intervals from one repeat: they cover request-to-request variation only, not run-to-run "
            "drift; run with --repeats 3 or more for intervals that do.")  # fmt: skip


def repeat_range(records: pd.DataFrame) -> tuple[int, int]:
    """The fewest and the most repeats of any level (they differ where level_repeats asks)."""
    if "repeat" not in records or records.empty:
        return 1, 1
    counts = records.groupby("level")["repeat"].nunique()
    return int(counts.min()), int(counts.max())


def _eff(level: int):
    def statistic(df: pd.DataFrame, index: np.ndarray) -> np.ndarray:
        return closed_loop_tok_s(level, df["valid_tokens"].to_numpy()[index], df["latency_s"].to_numpy()[index])

    return statistic


def _p95(df: pd.DataFrame, index: np.ndarray) -> np.ndarray:
    return percentile_ms_rows(df["latency_s"].to_numpy()[index], 95)


def _total_latency(df: pd.DataFrame, index: np.ndarray) -> np.ndarray:
    return df["latency_s"].to_numpy()[index].sum(axis=1)


def article_table(
    records: pd.DataFrame, results: RunResults, scenario: str, base: str = "baseline", treat: str = "dspark", seed: int = 0
) -> pd.DataFrame:
    """The article's rows for ``treat`` against ``base`` in one scenario; empty when either arm is missing."""
    if records.empty:
        return pd.DataFrame()
    mine = records[records["scenario"] == scenario]
    arms = {base: mine[mine["arm"] == base], treat: mine[mine["arm"] == treat]}
    if any(part.empty for part in arms.values()):
        return pd.DataFrame()
    levels = sorted(set(arms[base]["level"]) & set(arms[treat]["level"]))
    if not levels:
        return pd.DataFrame()
    # wall time per (arm, level, repeat): each repeat's tokens over its own wall time, then the median
    # over repeats, as the summary takes it
    walls = {(row.arm, row.level, row.repeat): row.metrics.wall_s for row in results.levels if row.scenario == scenario}

    def per_repeat(part: pd.DataFrame, arm: str, level: int, value) -> dict[int, float] | None:
        found = {}
        for repeat, group in part.groupby("repeat") if "repeat" in part else [(0, part)]:
            wall = walls.get((arm, level, int(repeat)))
            if not wall:
                return None
            found[int(repeat)] = value(group, wall)
        return found or None

    def median(values: dict[int, float] | None) -> float | None:
        return float(np.median(list(values.values()))) if values else None

    rng = np.random.default_rng(seed)
    rows = []

    def add(
        metric: str, a_value: float | None, b_value: float | None, ci: tuple[float, float] | None, kind: str, ratio: float | None = None
    ) -> None:
        """One row; a value None (no answer to measure) shows as NaN, its ratio too."""
        a_value = float("nan") if a_value is None else a_value
        b_value = float("nan") if b_value is None else b_value
        if ratio is None:
            ratio = b_value / a_value if a_value else float("nan")
        if kind == "x":
            change = f"{ratio:.2f}x" + (f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci else "")
        else:
            change = f"{ratio - 1:+.1%}" + (f" ({ci[0] - 1:+.1%} to {ci[1] - 1:+.1%})" if ci else "")
        rows.append({"metric": metric, base: round(a_value, 2), treat: round(b_value, 2), "change (95% CI)": change})

    # the article's two levels (one user, the most), and 8 where the run has it: where speculation's gain
    # turns into verification cost on a small machine
    for level in sorted({levels[0], levels[-1], *({8} & set(levels))}):
        a, b = (arms[arm][arms[arm]["level"] == level] for arm in (base, treat))
        measured = [per_repeat(part, arm, level, lambda g, wall: g["valid_tokens"].sum() / wall) for part, arm in ((a, base), (b, treat))]
        eff_a, eff_b = (
            median(value) if value is not None else float(_eff(level)(part, np.arange(len(part))[None])[0])
            for value, part in zip(measured, (a, b), strict=True)
        )
        if (paired := paired_ratio(*measured)) is not None and paired.interval is not None:
            add(f"effective JSON throughput (tok/s), concurrency {level}", eff_a, eff_b, paired.interval, "x", ratio=paired.ratio)
            continue
        ci = bootstrap_ratio(a, b, _eff(level), rng, point=eff_b / eff_a if eff_a and eff_b is not None else None)
        add(f"effective JSON throughput (tok/s), concurrency {level}", eff_a, eff_b, ci, "x")
    a, b = (arms[arm][arms[arm]["level"] == levels[0]] for arm in (base, treat))
    p95s = [per_repeat(part, arm, levels[0], lambda g, _wall: percentile_ms(g["latency_s"].tolist(), 95)) for part, arm in ((a, base), (b, treat))]
    p95_a, p95_b = median(p95s[0]), median(p95s[1])
    metric = f"P95 latency (ms), concurrency {levels[0]}"
    if p95_a is not None and p95_b is not None and (paired := paired_ratio(*p95s)) is not None and paired.interval is not None:
        add(metric, p95_a, p95_b, paired.interval, "%", ratio=paired.ratio)
    else:
        add(metric, percentile_ms(a["latency_s"].tolist(), 95), percentile_ms(b["latency_s"].tolist(), 95), bootstrap_ratio(a, b, _p95, rng), "%")
    top = levels[-1]
    a, b = (arms[arm][arms[arm]["level"] == top] for arm in (base, treat))
    walls_a = per_repeat(a, base, top, lambda _g, wall: wall)
    walls_b = per_repeat(b, treat, top, lambda _g, wall: wall)
    total_a, total_b = median(walls_a), median(walls_b)
    if total_a and total_b:
        metric = f"total time of the concurrency-{top} level, {len(a) // repeat_range(a)[1]} requests (s)"
        if (paired := paired_ratio(walls_a, walls_b)) is not None and paired.interval is not None:
            add(metric, total_a, total_b, paired.interval, "%", ratio=paired.ratio)
        else:
            add(metric, total_a, total_b, bootstrap_ratio(a, b, _total_latency, rng, point=total_b / total_a), "%")
    rates = {arm: (part["verdict"].isin([v.value for v in INVALID_JSON]).mean(), (part["verdict"] == "truncated").mean()) for arm, part in arms.items()}
    rows.append(
        {
            "metric": "invalid JSON rate, all levels (truncated apart)",
            **{arm: f"{invalid:.2%} (+{truncated:.2%} truncated)" for arm, (invalid, truncated) in rates.items()},
            "change (95% CI)": "",
        }
    )
    return pd.DataFrame(rows)
