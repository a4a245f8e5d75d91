"""The valid answers' own speed in a run, apart from the answers cut at max_tokens.

Effective tok/s counts valid answers' tokens over a level's wall time, so an arm that finishes looping answers
sooner reads faster even where each valid answer is not. This pairs each prompt answered validly by both the
reference arm and another arm (same level, same request id: the same prompt and repeat) and gives the geometric
mean of the reference's latency over the arm's; and each arm's share of its requests' time spent on answers
cut at max_tokens.

    python -m studies.valid_answers RUN_DIR [--against baseline-constrained]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
from collections import defaultdict
from pathlib import Path


def read_records(run: Path) -> list[dict]:
    path = run / "requests.jsonl"
    opener = open if path.exists() else gzip.open
    with opener(path if path.exists() else run / "requests.jsonl.gz", "rt") as lines:
        return [record for line in lines if not (record := json.loads(line))["warmup"]]


def latency(record: dict) -> float:
    return record["t_last_byte"] - record["t_send"]


def summary(records: list[dict], against: str) -> list[str]:
    by_prompt: dict[tuple[float, str], dict[str, dict]] = defaultdict(dict)
    for record in records:
        by_prompt[(record["level"], record["request_id"])][record["arm"]] = record
    lines = []
    for level in sorted({level for level, _ in by_prompt}):
        prompts = [arms for (lv, _), arms in by_prompt.items() if lv == level]
        spent, cut = defaultdict(float), defaultdict(float)
        for arms in prompts:
            for arm, record in arms.items():
                spent[arm] += latency(record)
                cut[arm] += latency(record) if record["finish_reason"] == "length" else 0.0
        for arm in sorted(spent.keys() - {against}):
            logs = [
                math.log(latency(arms[against]) / latency(arms[arm]))
                for arms in prompts
                if arm in arms and against in arms and arms[arm]["verdict"] == arms[against]["verdict"] == "valid"
            ]
            speed = f"{math.exp(sum(logs) / len(logs)):.2f}x" if logs else "-"
            lines.append(
                f"{level:g} users, {arm}: {len(logs)} answers valid in both, {against}'s latency / {arm}'s {speed}; "
                f"time on answers cut at max_tokens: {against} {cut[against] / spent[against]:.0%}, {arm} {cut[arm] / spent[arm]:.0%}"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m studies.valid_answers", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a run folder (requests.jsonl, or requests.jsonl.gz as committed)")
    parser.add_argument("--against", default="baseline-constrained")
    args = parser.parse_args(argv)
    print("\n".join(summary(read_records(args.run), args.against)))


if __name__ == "__main__":
    main()
