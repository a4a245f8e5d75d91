"""The source article's comparison table, per scenario, with 95% confidence intervals.

| metric | baseline | DSpark | change (95% CI) |, built from the per-request records of one run:
- effective JSON throughput at concurrency 1 and at the highest level: the summary's own figures (each
  level's throughput over its span, the median over repeats) and the ``compare.ratios`` paired ratio, the
  summary's and the verdict's. With one repeat, the CI resamples requests around that ratio and estimates
  throughput by Little's law for a closed loop (concurrency x valid tokens / summed latency);
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

from dspark_bench.loadtests.metrics import closed_loop_tok_s, percentile_ms_rows
from dspark_bench.loadtests.records import read_records
from dspark_bench.loadtests.results import RunResults, levels_frame
from dspark_bench.loadtests.validate import INVALID_JSON, Verdict
from dspark_bench.reports.compare import P95, THROUGHPUT, WALL, ratios

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
    # each level's own figures (metrics.py), the median over repeats as the summary takes it, and
    # compare.ratios' paired ratios over the repeats that were measurements
    figures: dict[tuple[str, float, str], list[float]] = {}
    for row in results.levels:
        if row.scenario == scenario:
            for column in (THROUGHPUT, P95, WALL):
                value = getattr(row.metrics, column)
                if value is not None:
                    figures.setdefault((column, row.level, row.arm), []).append(value)
    frame = levels_frame(results)
    pairs = {column: ratios(frame, base, column) for column in (THROUGHPUT, P95, WALL)}

    def median(column: str, level: float, arm: str) -> float | None:
        found = figures.get((column, level, arm))
        return float(np.median(found)) if found else None

    rng = np.random.default_rng(seed)
    rows = []

    def add(metric: str, a_value: float | None, b_value: float | None, ci: tuple[float, float] | None, kind: str, ratio: float) -> None:
        """One row; a value None (no answer to measure) shows as NaN."""
        a_value = float("nan") if a_value is None else a_value
        b_value = float("nan") if b_value is None else b_value
        if kind == "x":
            change = f"{ratio:.2f}x" + (f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci else "")
        else:
            change = f"{ratio - 1:+.1%}" + (f" ({ci[0] - 1:+.1%} to {ci[1] - 1:+.1%})" if ci else "")
        rows.append({"metric": metric, base: round(a_value, 2), treat: round(b_value, 2), "change (95% CI)": change})

    # the article's two levels (one user, the most), and 8 where the run has it: where speculation's gain
    # turns into verification cost on a small machine
    for level in sorted({levels[0], levels[-1], *({8} & set(levels))}):
        a, b = (arms[arm][arms[arm]["level"] == level] for arm in (base, treat))
        metric = f"effective JSON throughput (tok/s), concurrency {level}"
        paired = pairs[THROUGHPUT].get((scenario, level, treat))
        eff_a, eff_b = median(THROUGHPUT, level, base), median(THROUGHPUT, level, treat)
        if paired is not None and paired.interval is not None:
            add(metric, eff_a, eff_b, paired.interval, "x", ratio=paired.ratio)
        elif paired is not None:  # one repeat: the requests' spread around the measured ratio
            add(metric, eff_a, eff_b, bootstrap_ratio(a, b, _eff(level), rng, point=paired.ratio), "x", ratio=paired.ratio)
        else:
            add(metric, eff_a, eff_b, None, "x", ratio=float("nan"))
    first, top = levels[0], levels[-1]
    a, b = (arms[arm][arms[arm]["level"] == first] for arm in (base, treat))
    paired = pairs[P95].get((scenario, first, treat))
    p95_a, p95_b = median(P95, first, base), median(P95, first, treat)
    metric = f"P95 latency (ms), concurrency {first}"
    if paired is not None and paired.interval is not None:
        add(metric, p95_a, p95_b, paired.interval, "%", ratio=paired.ratio)
    elif paired is not None:
        add(metric, p95_a, p95_b, bootstrap_ratio(a, b, _p95, rng, point=paired.ratio), "%", ratio=paired.ratio)
    else:
        add(metric, p95_a, p95_b, None, "%", ratio=float("nan"))
    a, b = (arms[arm][arms[arm]["level"] == top] for arm in (base, treat))
    paired = pairs[WALL].get((scenario, top, treat))
    total_a, total_b = median(WALL, top, base), median(WALL, top, treat)
    if paired is not None and total_a and total_b:
        metric = f"total time of the concurrency-{top} level, {len(a) // repeat_range(a)[1]} requests (s)"
        if paired.interval is not None:
            add(metric, total_a, total_b, paired.interval, "%", ratio=paired.ratio)
        else:
            add(metric, total_a, total_b, bootstrap_ratio(a, b, _total_latency, rng, point=paired.ratio), "%", ratio=paired.ratio)
    rates = {arm: (part["verdict"].isin([v.value for v in INVALID_JSON]).mean(), (part["verdict"] == "truncated").mean()) for arm, part in arms.items()}
    rows.append(
        {
            "metric": "invalid JSON rate, all levels (truncated apart)",
            **{arm: f"{invalid:.2%} (+{truncated:.2%} truncated)" for arm, (invalid, truncated) in rates.items()},
            "change (95% CI)": "",
        }
    )
    return pd.DataFrame(rows)
