"""Each arm's paired ratio of effective JSON tok/s (a cost-only run's: raw) to another arm, as the harness computes it
(``reports.compare.ratios``: the geometric mean over the repeats in which both levels were valid, with an
exact-t 95% interval), and the per-repeat ratios behind it.

    .venv/bin/python -m studies.ratios RUN_DIR [--against ARM]

A run made before the pause check (``metrics.pause_problems``, session 17) has no longest silence in its
results: its levels' silences are recomputed from its records (requests.jsonl, or its gzip as committed), and
a level during which the server paused is not valid here, as it would be now.
"""

import argparse
import sys
from pathlib import Path

import pandas as pd

from dspark_bench.loadtests.arms import REFERENCE_ARM
from dspark_bench.loadtests.metrics import pause_problems
from dspark_bench.loadtests.results import levels_frame, load_results
from dspark_bench.reports.compare import ratios as ratios_to
from dspark_bench.reports.compare import throughput_metric
from studies.silences import LevelKey, recomputed_levels


def paused_levels(run: Path) -> dict[LevelKey, str]:
    """(arm, scenario, level, repeat) -> why, for the levels of ``run``'s records during which the server paused."""
    paused = {}
    for key, metrics in recomputed_levels(run).items():
        if problems := pause_problems(metrics.longest_silence_ms, metrics.itl_p99_ms, metrics.silence_flush):
            paused[key] = problems[0]
    return paused


def with_pauses(frame: pd.DataFrame, run: Path) -> pd.DataFrame:
    """``frame`` with the levels during which the server paused marked not valid, for runs before the check."""
    if "longest_silence_ms" in frame and frame["longest_silence_ms"].notna().any():
        return frame  # the run's own health already holds the check
    paused = paused_levels(run)
    keys = zip(frame["arm"], frame["scenario"], frame["level"].astype(float), frame["repeat"], strict=True)
    hits = [paused.get(key) for key in keys]
    for row, why in zip(frame.itertuples(), hits, strict=True):
        if why:
            print(f"  not valid here: {row.arm} at {row.level:g}, repeat {row.repeat}: {why}")
    return frame.assign(valid=[False if why else valid for why, valid in zip(hits, frame["valid"], strict=True)])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.ratios", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run folder (results.json and its records)")
    parser.add_argument("--against", default=REFERENCE_ARM, help=f"the arm each ratio is over (default: {REFERENCE_ARM})")
    args = parser.parse_args(argv)
    results = load_results(args.run)
    metric = throughput_metric(results)
    print(f"{args.run}: {results.machine.summary}; ratios of {metric}")
    frame = with_pauses(levels_frame(results), args.run)
    for (scenario, level, arm), paired in sorted(ratios_to(frame, args.against, metric).items()):
        if arm == args.against:
            continue
        each = ", ".join(f"{ratio:.2f}" for ratio in paired.per_repeat)
        interval = f" ({paired.low:.2f}-{paired.high:.2f})" if paired.interval else ""
        print(f"{scenario} {level:g} users  {arm} / {args.against}: {paired.ratio:.2f}x{interval}, {paired.repeats} pairs: {each}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
