"""Where the learned drafter misses on a workload, teacher-forced along the target's own answers under each
request's grammar (as vLLM serves json_schema), and what drafts from the request's own text would land there.

For each request: the target's greedy answer under its schema (xgrammar, any whitespace, as vLLM's default),
then, step by step as vLLM's dflash proposer drafts (the block starts at the next unverified token): the
one-pass drafter's accepted drafts, the repeat drafts' (``repeat_drafts.continuation``) at the same position,
and which tokens the grammar forced. Prints totals and, with ``--show``, each answer split where drafts missed.

    python -m studies.draft_misses --scenario examples/requests.jsonl --requests 24 [--show 4]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import xgrammar as xgr
from transformers import AutoModelForCausalLM

from dspark_bench.scenarios import Split, load_scenario
from dspark_serve.acceptance import landed
from dspark_serve.repeat_drafts import continuation
from models.dflash import MASK_TOKEN_ID, load_draft, target_features
from models.tokenizer import load_tokenizer


def constrained_answer(target, matcher, bitmask, prompt: list[int], max_tokens: int, eos: int) -> list[int]:
    """The target's greedy answer to ``prompt`` under ``matcher``'s grammar."""
    answer: list[int] = []
    past, step_input = None, torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(max_tokens):
            out = target(step_input, past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1].float()
            matcher.fill_next_token_bitmask(bitmask)
            xgr.apply_token_bitmask_inplace(logits, bitmask)
            token = int(logits.argmax())
            answer.append(token)
            if token == eos or not matcher.accept_token(token) or matcher.is_terminated():
                break
            step_input = torch.tensor([[token]])
    return answer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m studies.draft_misses", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="examples/requests.jsonl")
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--target", default="models/tiny-json")
    parser.add_argument("--draft", default="models/tiny-json-dflash")
    parser.add_argument("--show", type=int, default=0, help="print this many answers split where the drafter missed")
    args = parser.parse_args(argv)
    tok = load_tokenizer(Path(args.target))
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32).eval()
    draft, config = load_draft(Path(args.draft))
    vocab = target.lm_head.weight.shape[0]
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab))
    block, layers = config["block_size"], tuple(config["dflash_config"]["target_layer_ids"])
    totals = dict(tokens=0, cut_tokens=0, forced=0, steps=0, drafter=0, repeat=0, either=0)
    for n, sample in enumerate(load_scenario(args.scenario).samples(Split.EVAL, args.requests)):
        grammar = compiler.compile_json_schema(json.dumps(sample.schema)) if sample.schema else compiler.compile_builtin_json_grammar()
        text = tok.apply_chat_template(sample.messages, tokenize=False, add_generation_prompt=True)
        prompt = tok(text, add_special_tokens=False)["input_ids"]
        max_tokens = sample.max_tokens or 128
        answer = constrained_answer(target, xgr.GrammarMatcher(grammar), xgr.allocate_token_bitmask(1, vocab), prompt, max_tokens, tok.eos_token_id)
        walker = xgr.GrammarMatcher(grammar)
        for token in answer:  # forced: the grammar's jump-forward text starts with this token's text
            forced = walker.find_jump_forward_string()
            totals["forced"] += bool(forced) and forced.startswith(tok.decode([token]))
            if not walker.accept_token(token):
                break
        totals["tokens"] += len(answer)
        totals["cut_tokens"] += len(answer) if len(answer) >= max_tokens else 0
        ids = torch.tensor([prompt + answer])
        with torch.no_grad():
            features = target_features(target, ids, torch.ones_like(ids), layers)[0].float()
            start, pieces = len(prompt), []
            while start < ids.shape[1] - 1:
                block_ids = torch.full((1, block), MASK_TOKEN_ID)
                block_ids[0, 0] = ids[0, start]
                mask = torch.ones((1, block, start + block), dtype=torch.bool)
                hidden = draft(block_ids, torch.arange(start, start + block)[None], features[:, :start], torch.arange(start)[None], mask)
                drafts = (hidden @ target.lm_head.weight.float().T).argmax(-1)[0, 1:].tolist()
                truth = ids[0, start + 1 : start + block].tolist()
                hits = landed(drafts, truth)
                repeat = landed(continuation(ids[0, : start + 1].tolist(), block - 1), truth)
                totals["steps"] += 1
                totals["drafter"] += hits
                totals["repeat"] += repeat
                totals["either"] += max(hits, repeat)
                if n < args.show:
                    missed = tok.decode([truth[hits]]) if hits < len(truth) else ""
                    pieces.append(f"{tok.decode(truth[:hits])!r}|{missed!r}")
                start += hits + 1
        if n < args.show:
            print(f"answer {n}: {tok.decode(answer)[:200]!r}\n  {' '.join(pieces)[:1200]}\n")
    steps = totals["steps"]
    print(
        f"{args.scenario}: {args.requests} requests, {totals['tokens']} answer tokens "
        f"({totals['cut_tokens'] / totals['tokens']:.0%} in answers cut at max_tokens, {totals['forced'] / totals['tokens']:.0%} forced by the grammar); "
        f"along the drafter's {steps} steps, drafts landed per step: drafter {totals['drafter'] / steps:.2f}, "
        f"repeat {totals['repeat'] / steps:.2f}, the better of the two {totals['either'] / steps:.2f}"
    )


if __name__ == "__main__":
    main()
