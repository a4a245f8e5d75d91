"""What the engine core pays per step for grammar drafts under asynchronous scheduling
(``async_grammar_drafts.ForcedTexts.forced``), beside what it already pays for the step's grammar bitmask.

    .venv/bin/python studies/probe/forced_text_cost.py [REQUESTS ...]     (default 8 64 256)

Each request has a real xgrammar matcher on one invoice schema, compiled for the embedded tokenizer, and
walks its own copy of one answer one token a step, each starting at another point of it (a batch's requests
are at different places of their answers); per step: ``forced`` for every request, and xgrammar's bitmask
fill for one position per request, as vLLM's ``grammar_bitmask`` does without drafts. Prints the mean per
step of each, in microseconds, over 200 steps after 20 to warm up.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import xgrammar as xgr
from transformers import AutoTokenizer

from dspark_serve.async_grammar_drafts import ForcedTexts
from dspark_serve.grammar_drafts import GrammarDrafter

MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-json"
SCHEMA = {
    "type": "object",
    "properties": {
        "invoice_id": {"type": "string"},
        "currency": {"enum": ["EUR", "USD"]},
        "total": {"type": "number"},
        "customer_name": {"type": "string"},
        "due_date": {"type": "string"},
    },
    "required": ["invoice_id", "currency", "total", "customer_name", "due_date"],
    "additionalProperties": False,
}
ANSWER = '{"invoice_id": "INV-7", "currency": "EUR", "total": 12.5, "customer_name": "Ada Lovelace", "due_date": "2027-01-31"}'


def main(counts: list[int]) -> None:
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    grammar = xgr.GrammarCompiler(info).compile_json_schema(json.dumps(SCHEMA))
    answer = tokenizer.encode(ANSWER, add_special_tokens=False)
    bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
    for count in counts:
        requests, places = {}, {}
        for i in range(count):
            matcher = xgr.GrammarMatcher(grammar)
            structured = SimpleNamespace(params=SimpleNamespace(json_object=None, json=SCHEMA), grammar=SimpleNamespace(matcher=matcher))
            requests[str(i)] = SimpleNamespace(all_token_ids=[1, 2, 3], structured_output_request=structured)
            places[str(i)] = 0
            for token in answer[: i % (len(answer) - 1)]:
                matcher.accept_token(token)
                requests[str(i)].all_token_ids.append(token)
                places[str(i)] += 1
        scheduler = SimpleNamespace(
            requests=requests,
            structured_output_manager=SimpleNamespace(tokenizer=tokenizer),
            vllm_config=SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=5)),
            scheduler_config=SimpleNamespace(async_scheduling=True),
        )
        texts = ForcedTexts(GrammarDrafter())
        ids = list(requests)
        forced_s = fill_s = 0.0
        for step in range(220):
            start = time.perf_counter()
            texts.forced(scheduler, ids)
            middle = time.perf_counter()
            for request in requests.values():
                request.structured_output_request.grammar.matcher.fill_next_token_bitmask(bitmask, 0)
            end = time.perf_counter()
            if step >= 20:
                forced_s += middle - start
                fill_s += end - middle
            for request_id, request in requests.items():  # one token a step; a finished answer starts again
                matcher = request.structured_output_request.grammar.matcher
                if places[request_id] >= len(answer):
                    matcher.reset()
                    request.all_token_ids[3:] = []
                    places[request_id] = 0
                token = answer[places[request_id]]
                matcher.accept_token(token)
                request.all_token_ids.append(token)
                places[request_id] += 1
        print(f"{count:>4} requests: forced text {forced_s / 200 * 1e6:8.0f} us a step, bitmask fill {fill_s / 200 * 1e6:8.0f} us a step")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [8, 64, 256])
