"""JSON structure drafts under asynchronous scheduling: the engine core's per-request skeletons, kept up to date
one push a token, predict what the structure memory would predict from the whole stream; the predictions go
to the worker where nothing is forced, for the GPU's prompt-copy drafter only."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dspark_serve.async_grammar_drafts import ForcedTexts
from dspark_serve.drafter import StructureMemory, token_kinds
from dspark_serve.structure_lookahead import StructureLookahead

DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-json"
# compact, as the embedded model writes JSON
ANSWERS = [
    '{"order_id":"A-1","customer":"Ada","items":[{"sku":"X1","qty":2}]}',
    '{"order_id":"B-22","customer":"Grace Hopper","items":[{"sku":"Y7","qty":10}]}',
    '{"order_id":"C-3","customer":"Alan","items":[{"sku":"Z","qty":1}]}',
]


@pytest.fixture(scope="module")
def tokenizer():
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(DEFAULT_MODEL)


def _encode(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False)


def test_after_three_answers_the_key_after_a_value_is_predicted_as_the_whole_stream_would(tokenizer):
    lookahead = StructureLookahead()
    prompt = _encode(tokenizer, "Extract the order as JSON.")
    for n, answer in enumerate(ANSWERS):  # each answer taken in a few tokens a step, as the engine core does
        tokens = _encode(tokenizer, answer)
        request = SimpleNamespace(all_token_ids=list(prompt), num_prompt_tokens=len(prompt))
        for end in range(0, len(tokens) + 1, 3):
            request.all_token_ids = prompt + tokens[:end]
            lookahead.predict(str(n), request, tokenizer, 8)
        request.all_token_ids = prompt + tokens
        lookahead.predict(str(n), request, tokenizer, 8)
    # a fourth answer, at a new value's end: the memory learnt incrementally predicts the next key
    fourth = prompt + _encode(tokenizer, '{"order_id":"D-4","customer":"Edsger","')
    request = SimpleNamespace(all_token_ids=list(fourth), num_prompt_tokens=len(prompt))
    predicted = lookahead.predict("4", request, tokenizer, 8)
    assert tokenizer.decode(predicted).startswith('items":[{"sku":"')
    # the same as a memory that learnt every stream at once, from the same skeleton
    memory = StructureMemory(token_kinds(tokenizer))
    for answer in ANSWERS:
        memory.learn(np.array(prompt + _encode(tokenizer, answer)), len(prompt))
    whole = memory.learn(np.array(fourth), len(prompt))
    assert memory.continuation(whole, 8) == predicted
    assert memory.counts == lookahead.memory.counts


def test_finished_requests_skeletons_go_once_they_outnumber_the_live_ones(tokenizer):
    lookahead = StructureLookahead()
    request = SimpleNamespace(all_token_ids=_encode(tokenizer, '{"a": 1'), num_prompt_tokens=1)
    for n in range(70):
        lookahead.predict(str(n), request, tokenizer, 4)
    lookahead.forget({"69": request})
    assert set(lookahead.skeletons) == {"69"}


def test_predictions_go_where_nothing_is_forced_and_are_counted_apart(tokenizer):
    added = {}
    counters = SimpleNamespace(add=lambda name, count: added.__setitem__(name, added.get(name, 0) + count))
    lookahead = StructureLookahead()
    prompt = _encode(tokenizer, "Order:")
    for n, answer in enumerate(ANSWERS):
        lookahead.predict(f"old{n}", SimpleNamespace(all_token_ids=prompt + _encode(tokenizer, answer), num_prompt_tokens=len(prompt)), tokenizer, 8)
    json_object = SimpleNamespace(params=SimpleNamespace(json_object=True, json=None), grammar=None)
    request = SimpleNamespace(
        all_token_ids=prompt + _encode(tokenizer, '{"order_id":"D-4","'), num_prompt_tokens=len(prompt), structured_output_request=json_object
    )
    scheduler = SimpleNamespace(
        requests={"r": request},
        structured_output_manager=SimpleNamespace(tokenizer=tokenizer),
        vllm_config=SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=4)),
        scheduler_config=SimpleNamespace(async_scheduling=True),
    )
    sent = ForcedTexts(None, lookahead=lookahead, counters=counters).forced(scheduler, ["r"])
    start, tokens = sent["r"]
    assert start == len(request.all_token_ids) and tokenizer.decode(list(tokens)).startswith('customer":"')
    assert added == {"async_structure_tokens": len(tokens)}
    assert ForcedTexts(None, counters=counters).forced(scheduler, ["r"]) == {}  # no lookahead: nothing to send
