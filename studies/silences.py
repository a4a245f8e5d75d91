"""Each level's longest silence against the pause limit the harness applies (``metrics.pause_problems``):
the levels of older runs, made before the check, that a server's pause would now make not valid.

    .venv/bin/python -m studies.silences RUN_DIR [RUN_DIR ...]

RUN_DIR: a run folder with requests.jsonl or requests.jsonl.gz. Prints, per run, its levels' longest silence
as a multiple of their P99 gap between chunks, worst first, and every level past the limit.
"""

import sys
from collections import defaultdict
from pathlib import Path

from dspark_bench.loadtests.metrics import LevelMetrics, level_metrics, pause_problems
from dspark_bench.loadtests.records import RequestRecord, read_records

LevelKey = tuple[str, str, float, int]  # arm, scenario, level, repeat


def recomputed_levels(run: Path) -> dict[LevelKey, LevelMetrics]:
    """Each level's metrics, recomputed from ``run``'s records (requests.jsonl, or its gzip as committed)."""
    levels: dict[LevelKey, list[RequestRecord]] = defaultdict(list)
    for record in read_records(run):
        levels[(record.arm, record.scenario, float(record.level), record.repeat)].append(record)
    return {key: level_metrics(records) for key, records in levels.items()}


def main(runs: list[str]) -> int:
    if not runs:
        print("usage: python -m studies.silences RUN_DIR [RUN_DIR ...]", file=sys.stderr)
        return 2
    for run in map(Path, runs):
        found = []
        for (arm, _, level, repeat), metrics in recomputed_levels(run).items():
            if metrics.longest_silence_ms is not None and metrics.itl_p99_ms:
                problems = pause_problems(metrics.longest_silence_ms, metrics.itl_p99_ms, metrics.silence_flush)
                found.append((metrics.longest_silence_ms / metrics.itl_p99_ms, metrics.longest_silence_ms, arm, level, repeat, problems))
        found.sort(reverse=True)
        worst = ", ".join(f"{arm} {level:g} r{repeat} {silence:.0f} ms ({times:.1f}x)" for times, silence, arm, level, repeat, _ in found[:3])
        print(f"{run}: {len(found)} levels; longest silences: {worst}")
        for _, _, arm, level, repeat, problems in found:
            for problem in problems:
                print(f"  {arm} at {level:g}, repeat {repeat}: {problem}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
