"""Grammar drafts under asynchronous scheduling: the forced text the engine core sends with a step's bitmask
becomes the V2 runner's drafts one step later, where the tokens written since agree with it; with a real
xgrammar matcher and the embedded tokenizer, and the worker's overlay on CPU tensors (it runs on the GPU)."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from dspark_serve.async_grammar_drafts import FORCED, PENDING, ForcedOverlay, ForcedTexts, overlay, packed_rows
from dspark_serve.grammar_drafts import GrammarDrafter

torch = pytest.importorskip("torch")

DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-json"
INVOICE = {
    "type": "object",
    "properties": {
        "invoice_id": {"type": "string"},
        "currency": {"enum": ["EUR", "USD"]},
        "total": {"type": "number"},
        "customer_name": {"type": "string"},
    },
    "required": ["invoice_id", "currency", "total", "customer_name"],
    "additionalProperties": False,
}
K = 4


def _overlay(drafts, history, total, starts, forced):
    """``overlay`` for rows 0..B-1 of ``history`` (a [B, L] token table), ``forced``: one list per row."""
    width = max([len(f) for f in forced] + [1])
    table = torch.zeros((len(forced), width), dtype=torch.int64)
    for i, tokens in enumerate(forced):
        table[i, : len(tokens)] = torch.tensor(tokens, dtype=torch.int64)
    return overlay(
        torch.tensor(drafts, dtype=torch.int64),
        torch.tensor(history, dtype=torch.int32),
        torch.tensor(total, dtype=torch.int32),
        torch.arange(len(forced), dtype=torch.int64),
        torch.tensor(starts, dtype=torch.int64),
        table,
        torch.tensor([len(f) for f in forced], dtype=torch.int64),
    ).tolist()


def test_the_forced_tokens_after_those_written_become_the_drafts():
    history = [[5, 6, 70, 71, 0, 0, 0, 0]] * 4
    drafts = [[9, 9, 9]] * 4
    got = _overlay(
        drafts,
        history,
        total=[4, 4, 4, 3],
        starts=[2, 2, 2, 2],
        forced=[
            [70, 71, 72, 73, 74],  # the step wrote 70 71 as forced: 72 73 74 follow
            [70, 99, 72],  # the step wrote 71 where 99 was forced: the speculator's drafts stay
            [70, 71, 72],  # only 72 is left: one forced draft, then the speculator's
            [70, 71, 72, 73, 74, 75],  # one token written so far: the next three
        ],
    )
    assert got == [[72, 73, 74], [9, 9, 9], [72, 9, 9], [71, 72, 73]]


def test_rows_with_nothing_forced_or_all_of_it_written_keep_their_drafts():
    history = [[5, 6, 70, 71, 0, 0]] * 3
    got = _overlay([[9, 9]] * 3, history, total=[4, 4, 4], starts=[-1, 2, 5], forced=[[70], [70, 71], [1, 2]])
    # no forced text; forced text fully written; a start past what was written
    assert got == [[9, 9], [9, 9], [9, 9]]


def test_batch_rows_are_packed_in_the_batchs_order():
    table = packed_rows(["a", "b", "c"], {"c": (7, (1, 2, 3)), "a": (4, (8,))})
    assert table.tolist() == [[4, 1, 8, 0, 0], [-1, 0, 0, 0, 0], [7, 3, 1, 2, 3]]
    assert packed_rows(["a"], {"b": (1, (2,))}) is None


@pytest.fixture(scope="module")
def tokenizer():
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(DEFAULT_MODEL)


def _request(tokenizer, prompt):
    xgr = pytest.importorskip("xgrammar")
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_json_schema(json.dumps(INVOICE)))
    structured = SimpleNamespace(params=SimpleNamespace(json_object=None, json=INVOICE), grammar=SimpleNamespace(matcher=matcher))
    return SimpleNamespace(all_token_ids=list(prompt), structured_output_request=structured)


def _scheduler(tokenizer, requests, async_scheduling=True):
    return SimpleNamespace(
        requests=requests,
        structured_output_manager=SimpleNamespace(tokenizer=tokenizer),
        vllm_config=SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=K)),
        scheduler_config=SimpleNamespace(async_scheduling=async_scheduling),
    )


def test_a_real_grammars_forced_text_drafts_what_the_answer_writes_next_one_step_late(tokenizer):
    """At every point of a real answer, for every count of tokens the step in flight wrote (1 to K + 1), the
    drafts taken from the text the grammar forced before that step are the answer's next tokens."""
    answer = tokenizer.encode(
        '{"invoice_id": "INV-7", "currency": "EUR", "total": 12.5, "customer_name": "Ada Lovelace"}', add_special_tokens=False
    )
    prompt = tokenizer.encode("Invoice INV-7 for Ada Lovelace, 12.5 EUR.", add_special_tokens=False)
    request = _request(tokenizer, prompt)
    texts = ForcedTexts(GrammarDrafter())
    scheduler = _scheduler(tokenizer, {"r": request})
    history = prompt + answer
    forced_drafts = 0
    for seen in range(len(answer)):  # the engine core has taken in answer[:seen]
        forced = texts.forced(scheduler, ["r"])
        if "r" in forced:
            start, tokens = forced["r"]
            assert start == len(prompt) + seen
            for written in range(1, K + 2):  # the step in flight wrote this many more
                total = min(start + written, len(history))
                drafts = _overlay([[-7] * K], [history], [total], [start], [list(tokens)])[0]
                from_forced = [d for d in drafts if d != -7]
                assert from_forced == history[total : total + len(from_forced)]
                forced_drafts += len(from_forced)
        assert request.structured_output_request.grammar.matcher.accept_token(answer[seen])
        request.all_token_ids.append(answer[seen])
    assert forced_drafts >= 20  # the property names: forced once their quote is open


def test_only_asynchronous_scheduling_sends_forced_text(tokenizer):
    prompt = tokenizer.encode("Invoice", add_special_tokens=False)
    request = _request(tokenizer, prompt)
    for token in tokenizer.encode('{"', add_special_tokens=False):
        assert request.structured_output_request.grammar.matcher.accept_token(token)
        request.all_token_ids.append(token)

    def bitmask(texts, scheduler):
        output = SimpleNamespace(structured_output_request_ids=["r"])
        return getattr(texts.get_grammar_bitmask(lambda _: output, scheduler, None), FORCED, None)

    sent = bitmask(ForcedTexts(GrammarDrafter()), _scheduler(tokenizer, {"r": request}))
    assert sent is not None and sent["r"][0] == len(request.all_token_ids)
    assert [tokenizer.decode([t]) for t in sent["r"][1]] == ["in", "voice", "_", "id"]
    # synchronous scheduling drafts it in the engine core (engine_drafts); a gate that drafts nothing after the step
    assert bitmask(ForcedTexts(GrammarDrafter()), _scheduler(tokenizer, {"r": request}, async_scheduling=False)) is None
    assert bitmask(ForcedTexts(GrammarDrafter(), drafting=lambda: False), _scheduler(tokenizer, {"r": request})) is None
    # an error turns it off and the bitmask still goes out
    broken = ForcedTexts(GrammarDrafter())
    assert bitmask(broken, SimpleNamespace(scheduler_config=SimpleNamespace(async_scheduling=True))) is None
    assert broken.broken


def test_forced_texts_stop_at_their_time_budget_and_the_ones_left_out_go_first_next_step(tokenizer, monkeypatch):
    """Worked out per request on the step's critical path: once a step's budget is spent the rest wait, and the
    next step starts with them, so every request gets its forced text every few steps."""
    from dspark_serve import async_grammar_drafts

    prompt = tokenizer.encode("Invoice", add_special_tokens=False)
    request = _request(tokenizer, prompt)
    for token in tokenizer.encode('{"', add_special_tokens=False):
        assert request.structured_output_request.grammar.matcher.accept_token(token)
        request.all_token_ids.append(token)
    ids = ["r0", "r1", "r2", "r3"]
    scheduler = _scheduler(tokenizer, dict.fromkeys(ids, request))
    assert set(ForcedTexts(GrammarDrafter()).forced(scheduler, ids)) == set(ids)  # no budget: every request
    clock = iter(range(1000))  # each reading of the clock one second later
    monkeypatch.setattr(async_grammar_drafts.time, "perf_counter", lambda: float(next(clock)))
    texts = ForcedTexts(GrammarDrafter(), budget=lambda: 1.5)  # room for two requests a step
    assert [set(texts.forced(scheduler, ids)) for _ in range(3)] == [{"r0", "r1"}, {"r2", "r3"}, {"r0", "r1"}]
    # a budget spent before the first request still serves one a step, in turn
    starved = ForcedTexts(GrammarDrafter(), budget=lambda: 0.0)
    assert [set(starved.forced(scheduler, ids)) for _ in range(5)] == [{"r0"}, {"r1"}, {"r2"}, {"r3"}, {"r0"}]


class _Speculator:
    def __init__(self):
        self.calls = 0

    def propose(self, input_batch, *args, **kwargs):
        self.calls += 1
        return torch.full((len(input_batch.req_ids), 3), 9, dtype=torch.int64)


def _runner(speculator):
    history = torch.tensor([[5, 6, 70, 71, 0, 0, 0, 0], [5, 6, 7, 8, 0, 0, 0, 0]], dtype=torch.int32)
    states = SimpleNamespace(
        all_token_ids=SimpleNamespace(gpu=history), total_len=SimpleNamespace(gpu=torch.tensor([4, 4], dtype=torch.int32))
    )
    return SimpleNamespace(speculator=speculator, req_states=states)


def test_the_worker_overlays_what_the_engine_core_sent_with_the_step_and_nothing_else():
    speculator = _Speculator()
    runner = _runner(speculator)
    batch = SimpleNamespace(req_ids=["b", "a"], idx_mapping=torch.tensor([1, 0]))
    hooks = ForcedOverlay()
    output = SimpleNamespace(**{FORCED: {"a": (2, (70, 71, 72, 73))}})

    def sample(grammar_output):  # vLLM's sample_tokens: samples, then asks its speculator for drafts
        assert getattr(runner, PENDING) == getattr(grammar_output, FORCED, None)
        return runner.speculator.propose(batch)

    assert hooks.sample_tokens(sample, runner, output).tolist() == [[9, 9, 9], [72, 73, 9]]
    assert getattr(runner, PENDING) is None  # warm-up runs between steps find nothing pending
    assert runner.speculator.propose(batch).tolist() == [[9, 9, 9], [9, 9, 9]]
    assert hooks.sample_tokens(sample, runner, SimpleNamespace()).tolist() == [[9, 9, 9], [9, 9, 9]]
    assert hooks.sample_tokens(sample, runner, None).tolist() == [[9, 9, 9], [9, 9, 9]]
    # an error turns it off: the speculator's own drafts go out
    runner.req_states = None
    assert hooks.sample_tokens(sample, runner, output).tolist() == [[9, 9, 9], [9, 9, 9]]
    assert hooks.broken and speculator.calls == 5


def test_a_runner_that_was_never_sent_forced_text_keeps_its_speculator_as_it_is():
    speculator = _Speculator()
    propose = speculator.propose
    runner = _runner(speculator)
    ForcedOverlay().sample_tokens(lambda grammar_output: None, runner, SimpleNamespace())
    assert runner.speculator.propose == propose
