"""An arm's paired ratio over the repeats where no answer looped (repeat drafts wrote little of its output).

Where the embedded model loops, repeat drafts finish the loop sooner, which is real but not what "nothing
lands" asks. This gives, per scenario and level, the arm's ratio to each other arm over all repeats and over
the repeats whose repeat-draft share of the arm's output (``server:repeat_draft_share``) is under
``--loop-share``: geometric mean of the paired per-repeat ratios with its exact-t 95% interval, as the report.

    python -m studies.loop_free RUN_DIR --arm dspark-missing [--loop-share 0.05]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dspark_bench.loadtests.results import by_repeat, levels_frame, load_results
from dspark_bench.reports.intervals import paired_ratio

MEASURE = "effective_tok_s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--arm", required=True, help="the arm whose loops are set apart")
    parser.add_argument("--loop-share", type=float, default=0.05, help="a repeat loops where repeat drafts wrote at least this share")
    args = parser.parse_args()
    frame = levels_frame(load_results(args.run))
    for (scenario, level), rows in frame.groupby(["scenario", "level"]):
        mine = rows[rows.arm == args.arm]
        loop_free = set(mine[mine["server:repeat_draft_share"] < args.loop_share].repeat)
        print(f"{scenario} at {level:g} users: {len(loop_free)} of {len(mine)} repeats without loops {sorted(loop_free)}")
        for other in sorted(set(rows.arm) - {args.arm}):
            theirs, ours = by_repeat(rows[rows.arm == other], MEASURE), by_repeat(mine, MEASURE)
            for label, keep in (("all repeats", set(ours)), ("without loops", loop_free)):
                ratio = paired_ratio({r: v for r, v in theirs.items() if r in keep}, {r: v for r, v in ours.items() if r in keep})
                text = "-" if ratio is None else f"{ratio.ratio:.2f}x ({ratio.low:.2f}-{ratio.high:.2f})"
                print(f"  {args.arm} / {other}, {label}: {text}")


if __name__ == "__main__":
    main()
