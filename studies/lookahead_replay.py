"""Replay a run's recorded answers offline through three ways of drafting, and print the tokens each step
writes: the GPU's prompt copy alone (as vLLM's ``ngram_gpu`` looks up, 2 to 5 tokens, longest then latest),
the same with the structure memory's predictions one step late (``structure_lookahead``, as under
asynchronous scheduling), and the structure drafter under synchronous scheduling (``drafter.propose_one``).

    .venv/bin/python -m studies.lookahead_replay benchmarks/gpu/h100-s55-order-1-8 [--arm baseline-constrained] [-k 8]

Greedy verification is replayed exactly: a step accepts its drafts' longest prefix that matches the recorded
answer, plus one token from the model. Lag: the predictions a step's drafts come from were made when the
engine core had taken in the tokens before the step before it (``async_grammar_drafts.overlay`` is the test
that they still agree). Requests are replayed one after another in the order they were sent, each prompt once.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from dspark_bench.loadtests.records import read_records
from dspark_bench.scenarios import Split, load_scenario
from dspark_serve.drafter import StructureMemory, TextCopy, copy_candidates, propose_one, token_kinds
from dspark_serve.structure_lookahead import StructureLookahead
from models.tokenizer import load_tokenizer

MODES = ("ngram", "lookahead", "sync")


def answers(run_dir: Path, arm: str, tok) -> list[tuple[list[int], list[int]]]:
    """(prompt tokens, answer tokens with EOS) of each valid answer of ``arm``, each prompt once, in send order."""
    found, seen = [], set()
    for row in sorted((r for r in read_records(run_dir) if r.arm == arm and r.verdict == "valid"), key=lambda r: r.t_send):
        if (row.scenario, row.seed) in seen:
            continue
        seen.add((row.scenario, row.seed))
        scenario = load_scenario(row.scenario)
        sample = next(scenario.samples(Split.EVAL, 1, offset=row.seed - scenario.splits[Split.EVAL][0]))
        prompt = tok.apply_chat_template(sample.messages, tokenize=False, add_generation_prompt=True)
        found.append((tok(prompt, add_special_tokens=False)["input_ids"], tok(row.output, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]))
    return found


def replay(pairs: list[tuple[list[int], list[int]]], tok, k: int, mode: str) -> tuple[float, float]:
    """Mean tokens a step writes over ``pairs`` drafting by ``mode``, and the engine core's mean seconds a
    prediction (learning included; lookahead only)."""
    memory = StructureMemory(token_kinds(tok))
    text_copy = TextCopy(tok)
    lookahead = StructureLookahead()
    steps = written = 0
    predicting = 0.0
    for n, (prompt, answer) in enumerate(pairs):
        seq = np.array(prompt + answer, dtype=np.int32)
        request = SimpleNamespace(all_token_ids=list(seq[: len(prompt) + 1]), num_prompt_tokens=len(prompt))
        position = len(prompt) + 1  # the first answer token comes from the prefill
        memory.learn(seq[:position], len(prompt))
        predicted, anchor = [], position
        while position < len(seq):
            if mode == "sync":
                drafts = propose_one(seq[:position], k, memory, text_copy)
            else:
                drafts = copy_candidates(seq[:position], k, (2, 5))
                agreed = position - anchor
                if mode == "lookahead" and len(predicted) > agreed and list(seq[anchor:position]) == predicted[:agreed]:
                    ahead = predicted[agreed : agreed + k]
                    drafts = ahead + list(drafts[: k - len(ahead)])
            accepted = 0
            for token in drafts:
                if position + accepted >= len(seq) or seq[position + accepted] != token:
                    break
                accepted += 1
            advance = min(accepted + 1, len(seq) - position)
            if mode == "sync":
                memory.learn(seq[: position + advance], position)
            elif mode == "lookahead":  # the engine core has taken in the tokens before this step: it predicts from there
                request.all_token_ids = list(seq[:position])
                start = time.perf_counter()
                predicted, anchor = lookahead.predict(str(n), request, tok, 2 * k + 1), position
                predicting += time.perf_counter() - start
            position += advance
            steps += 1
            written += advance
    return written / max(1, steps), predicting / max(1, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--arm", default="baseline-constrained", help="whose recorded answers to replay")
    parser.add_argument("-k", type=int, default=8, help="draft length (ngram_gpu's under dspark-serve: 8)")
    parser.add_argument("--model", default="models/tiny-json", help="model folder with the tokenizer")
    args = parser.parse_args()
    tok = load_tokenizer(Path(args.model))
    pairs = answers(args.run_dir, args.arm, tok)
    for mode in MODES:
        per_step, cost = replay(pairs, tok, args.k, mode)
        spent = f", {cost * 1e6:.0f} us a prediction" if mode == "lookahead" else ""
        print(f"{mode:9s} {len(pairs)} answers of {args.arm}, k={args.k}: {per_step:.2f} tokens a step{spent}")


if __name__ == "__main__":
    main()
