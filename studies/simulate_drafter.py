"""Replay a run's recorded answers through the structure drafter, offline: its mean acceptance length.

    .venv/bin/python benchmarks/dspark/simulate_drafter.py runs/<run> --arm baseline-constrained -k 12

Greedy verification is replayed exactly: each step accepts the draft's longest prefix that matches the
recorded answer, plus one token from the model. Requests are replayed in the order they were sent, so
the structure memory learns as it would in the server. Seconds instead of a server run when tuning.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from dspark_bench.loadtests.records import read_records
from dspark_bench.scenarios import Split, load_scenario
from dspark_serve.drafter import StructureMemory, TextCopy, propose_one, token_kinds
from models.tokenizer import load_tokenizer


def replay(run_dir: Path, arm: str, k: int, model: str, use_text_copy: bool = True) -> tuple[int, float]:
    tok = load_tokenizer(Path(model))
    memory = StructureMemory(token_kinds(tok))
    text_copy = TextCopy(tok) if use_text_copy else None
    records = sorted((r for r in read_records(run_dir) if r.arm == arm and r.verdict == "valid"), key=lambda r: r.t_send)
    steps = tokens = 0
    for row in records:
        scenario = load_scenario(row.scenario)
        sample = next(scenario.samples(Split.EVAL, 1, offset=row.seed - scenario.splits[Split.EVAL][0]))
        prompt = tok.apply_chat_template(sample.messages, tokenize=False, add_generation_prompt=True)
        prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        answer = tok(row.output, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        seq = np.array(prompt_ids + answer, dtype=np.int32)
        position = len(prompt_ids) + 1  # the first answer token comes from the prefill
        memory.learn(seq[:position], len(prompt_ids))
        while position < len(seq):
            accepted = 0
            for token in propose_one(seq[:position], k, memory, text_copy):
                if position + accepted >= len(seq) or seq[position + accepted] != token:
                    break
                accepted += 1
            advance = min(accepted + 1, len(seq) - position)
            memory.learn(seq[: position + advance], position)
            position += advance
            steps += 1
            tokens += advance
    return len(records), tokens / max(1, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--arm", default="baseline-constrained", help="whose recorded answers to replay")
    parser.add_argument("-k", type=int, default=12, help="draft length")
    parser.add_argument("--model", default="models/tiny-json", help="model folder with the tokenizer")
    parser.add_argument("--no-text-copy", action="store_true", help="copy by token ids only")
    args = parser.parse_args()
    count, length = replay(args.run_dir, args.arm, args.k, args.model, not args.no_text_copy)
    print(f"{count} answers of {args.arm}, k={args.k}: mean acceptance length {length:.2f}")


if __name__ == "__main__":
    main()
