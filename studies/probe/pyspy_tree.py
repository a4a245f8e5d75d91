"""Share of a py-spy raw profile (`py-spy record -f raw`) under one frame, as a tree.

    .venv/bin/python studies/probe/pyspy_tree.py PROFILE.txt ANCHOR [DEPTH] [--thread FRAME]

ANCHOR: a frame name such as "GPUModelRunner.propose_draft_token_ids"; only stacks through it count.
--thread FRAME keeps only stacks that contain FRAME (the worker's main loop: worker_busy_loop).
"""

import argparse
from collections import Counter


def frame_name(frame: str) -> str:
    return frame.split(" (")[0] + ":" + frame.rsplit(":", 1)[-1].rstrip(")")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("profile")
    parser.add_argument("anchor")
    parser.add_argument("depth", type=int, nargs="?", default=4)
    parser.add_argument("--thread", default=None)
    args = parser.parse_args()
    tree: Counter[tuple[str, ...]] = Counter()
    total = 0
    with open(args.profile, encoding="utf-8") as lines:
        for line in lines:
            stack, _, count = line.rstrip().rpartition(" ")
            if args.thread and args.thread not in stack:
                continue
            frames = [frame_name(f) for f in stack.split(";")]
            at = next((i for i, f in enumerate(frames) if args.anchor in f), None)
            if at is None:
                continue
            total += int(count)
            path = frames[at : at + args.depth + 1]
            for depth in range(1, len(path) + 1):
                tree[tuple(path[:depth])] += int(count)
    for key in sorted(tree):
        if tree[key] / total > 0.01:
            print(f"{tree[key] / total * 100:5.1f}% " + "  " * (len(key) - 1) + key[-1])
    print(f"samples under {args.anchor}: {total}")


if __name__ == "__main__":
    main()
