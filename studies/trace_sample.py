"""Writes ``examples/trace-mooncake.jsonl``: a 200-request trace in Mooncake's published format (JSON
Lines of ``timestamp`` in ms, ``input_length``, ``output_length``, ``hash_ids`` of 512-token blocks), sized
for the embedded model's 1,024-token context: bursts and quiet periods, a few shared leading blocks.

    python -m studies.trace_sample [--out examples/trace-mooncake.jsonl] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

REQUESTS = 200


def trace(seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows, at_ms, next_block = [], 0.0, 1000
    shared = list(range(8))  # leading blocks many requests share (a system prompt, a common document)
    while len(rows) < REQUESTS:
        burst = rng.random() < 0.3
        for _ in range(rng.randint(4, 12) if burst else rng.randint(1, 3)):
            input_length = rng.randint(60, 160)
            blocks = -(-input_length // 512)
            first = [rng.choice(shared)] if rng.random() < 0.6 else []
            own = list(range(next_block, next_block + blocks - len(first)))
            next_block += len(own)
            rows.append({"timestamp": int(at_ms), "input_length": input_length, "output_length": rng.randint(16, 64),
                         "hash_ids": first + own})  # fmt: skip
            at_ms += rng.expovariate(1 / (150 if burst else 500))
        at_ms += rng.expovariate(1 / 1500)  # a quiet period
    return rows[:REQUESTS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("examples/trace-mooncake.jsonl"))
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    args.out.write_text("".join(json.dumps(row) + "\n" for row in trace(args.seed)))
    print(f"wrote {REQUESTS} requests to {args.out}")


if __name__ == "__main__":
    main()
