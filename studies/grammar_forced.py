"""How many answer tokens does the grammar force? What drafting from the grammar state could give.

    .venv/bin/python benchmarks/dspark/grammar_forced.py [--scenarios order_extraction,...] [--prompts 100]

The reference answers of held-out prompts are tokenized and walked through xgrammar (the structured-
output backend vLLM uses here) under json_object (vLLM's builtin JSON grammar) and under the
scenario's JSON Schema. A token is grammar-forced when the grammar's bitmask admits exactly that one
token: a drafter reading the request's grammar state would propose exactly these (jump-forward), and
nothing else for free. Runs offline, in seconds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import xgrammar as xgr

from dspark_bench.scenarios import Split, load_scenario
from dspark_serve.grammar_counter import single_token_rows
from models.tokenizer import load_tokenizer

MODEL = Path(__file__).resolve().parents[1] / "models" / "tiny-json"


# The grammars vLLM 0.32's xgrammar backend compiles (structured_output/backend_xgrammar.py): free
# whitespace by default; "compact" = --structured-outputs-config '{"disable_any_whitespace": true}'.
# json_object compact is left out: xgrammar 0.2.8 still demands ", " there (mlc-ai/xgrammar#945) and
# rejects this model's compact '","' token.
GRAMMARS = ("json_object", "json_schema", "json_schema compact")


def compile_as_vllm(compiler: xgr.GrammarCompiler, label: str, schema: dict | None) -> xgr.CompiledGrammar:
    if label == "json_object":
        return compiler.compile_json_schema('{"type": "object"}', any_whitespace=True)
    if label == "json_schema":
        return compiler.compile_json_schema(json.dumps(schema), any_whitespace=True)
    return compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, separators=(",", ":"))


def forced_tokens(matcher: xgr.GrammarMatcher, token_ids: list[int], pieces: list[bytes], bitmask) -> tuple[int, int]:
    """Walk one answer; return (tokens the bitmask pins to one choice, tokens inside jump-forward strings).

    The first is what a grammar-state drafter gets token by token; the second counts every token whose
    bytes all lie inside a string the grammar forces from some earlier position (xgrammar's
    find_jump_forward_string), however the tokenizer splits it: the most such a drafter could get.
    """
    text = b"".join(pieces)
    forced_bytes = bytearray(len(text))
    single = inside = offset = 0
    for token, piece in zip(token_ids, pieces, strict=True):
        matcher.fill_next_token_bitmask(bitmask)
        single += bool(single_token_rows(bitmask.numpy())[0])  # what the server counts as grammar-forced
        jump = matcher.find_jump_forward_string().encode()
        if jump and text.startswith(jump, offset):
            forced_bytes[offset : offset + len(jump)] = b"\x01" * len(jump)
        inside += all(forced_bytes[offset : offset + len(piece)])
        offset += len(piece)
        if not matcher.accept_token(token):
            raise ValueError(f"token {token} rejected: the answer does not parse under this grammar")
    return single, inside


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="order_extraction,review_sentiment,tool_call")
    parser.add_argument("--prompts", type=int, default=100)
    args = parser.parse_args()
    tokenizer = load_tokenizer(MODEL)
    vocab_size = json.loads((MODEL / "config.json").read_text())["vocab_size"]
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
    compiler = xgr.GrammarCompiler(info)
    bitmask = xgr.allocate_token_bitmask(1, vocab_size)
    print("| scenario | grammar | answer tokens | pinned to one token | inside forced strings |")
    print("|---|---|---:|---:|---:|")
    for name in args.scenarios.split(","):
        samples = list(load_scenario(name).samples(Split.EVAL, args.prompts))
        for label in GRAMMARS:
            total = single = inside = 0
            for sample in samples:
                ids = tokenizer.encode(sample.answer_text(), add_special_tokens=False)
                pieces = [info.decoded_vocab[i] for i in ids]  # bytes: a token may hold half a character
                assert b"".join(pieces) == sample.answer_text().encode()
                one, covered = forced_tokens(
                    xgr.GrammarMatcher(compile_as_vllm(compiler, label, sample.schema)), ids, pieces, bitmask
                )
                total, single, inside = total + len(ids), single + one, inside + covered
            print(
                f"| {name} | {label} | {total} | {single} ({100 * single / total:.1f}%) | {inside} ({100 * inside / total:.1f}%) |"
            )


if __name__ == "__main__":
    main()
