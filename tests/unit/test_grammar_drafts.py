"""Grammar drafts: the forced text of a real xgrammar matcher, tokenized by the embedded model's tokenizer,
is what the target writes; merging with the learned drafter; a budget that follows acceptance and cost."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from dspark_serve.grammar_drafts import GrammarDrafter, Spellings, forced_tokens, jump_forward_string

# The embedded model, found from this file: the engine patch's tests import nothing from the harness.
DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-json"
INVOICE = {
    "type": "object",
    "properties": {"invoice_id": {"type": "string"}, "currency": {"enum": ["EUR", "USD"]}, "total": {"type": "number"}},
    "required": ["invoice_id", "currency", "total"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def tokenizer():
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(DEFAULT_MODEL)


@pytest.fixture
def matcher(tokenizer):
    xgr = pytest.importorskip("xgrammar")
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    return xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_json_schema(json.dumps(INVOICE)))


def _encode(tokenizer):
    return lambda text: tokenizer.encode(text, add_special_tokens=False)


def test_forced_property_names_become_the_tokens_the_target_writes(tokenizer, matcher):
    answer = _encode(tokenizer)('{"invoice_id": "INV-7", "currency": "EUR", "total": 12.5}')
    request = SimpleNamespace(structured_output_request=SimpleNamespace(grammar=SimpleNamespace(matcher=matcher)))
    drafted = landed = 0
    for position, token in enumerate(answer):
        drafts = forced_tokens(jump_forward_string(request), _encode(tokenizer), 12)
        written = answer[position : position + len(drafts)]
        drafted += len(drafts)
        landed += sum(1 for _ in zip(drafts, written, strict=False)) if drafts == written else 0
        assert matcher.accept_token(token)
    # property names are forced once their quote is open ("invoice_id" splits into 4 tokens here)
    assert drafted >= 6 and landed == drafted


def test_the_last_forced_token_is_left_out(tokenizer, matcher):
    for token in _encode(tokenizer)('{"'):
        assert matcher.accept_token(token)
    forced = matcher.find_jump_forward_string()
    assert forced == 'invoice_id"'
    # the target writes '":' as one token: the forced '"' alone would be a draft that misses
    assert [tokenizer.decode([t]) for t in forced_tokens(forced, _encode(tokenizer), 12)] == ["in", "voice", "_", "id"]
    assert forced_tokens(forced, _encode(tokenizer), 2) == forced_tokens(forced, _encode(tokenizer), 12)[:2]
    assert forced_tokens("", _encode(tokenizer), 12) == [] and forced_tokens(forced, _encode(tokenizer), 0) == []


def test_no_matcher_or_a_finished_grammar_forces_nothing(matcher):
    assert jump_forward_string(SimpleNamespace(structured_output_request=None)) == ""
    assert jump_forward_string(SimpleNamespace(structured_output_request=SimpleNamespace(grammar=None))) == ""
    finished = SimpleNamespace(is_terminated=lambda: True, find_jump_forward_string=lambda: "x")
    assert (
        jump_forward_string(SimpleNamespace(structured_output_request=SimpleNamespace(grammar=SimpleNamespace(matcher=finished))))
        == ""
    )


def test_json_object_requests_are_not_asked_for_forced_text(tokenizer):
    """json_object's grammar forces nothing worth a draft: no lookup; a schema's grammar is asked."""
    xgr = pytest.importorskip("xgrammar")
    from vllm.sampling_params import StructuredOutputsParams

    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    compiler = xgr.GrammarCompiler(info)

    def request(params, grammar):
        matcher = xgr.GrammarMatcher(grammar)
        for token in _encode(tokenizer)('{"ok": tru'):  # "e" is forced in any JSON grammar here
            assert matcher.accept_token(token)
        return SimpleNamespace(structured_output_request=SimpleNamespace(params=params, grammar=SimpleNamespace(matcher=matcher)))

    any_json = request(StructuredOutputsParams(json_object=True), compiler.compile_builtin_json_grammar())
    assert any_json.structured_output_request.grammar.matcher.find_jump_forward_string() == "e"
    assert jump_forward_string(any_json) == ""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    with_schema = request(StructuredOutputsParams(json=schema), compiler.compile_json_schema(json.dumps(schema)))
    assert jump_forward_string(with_schema).startswith("e")


def test_grammar_drafts_follow_their_acceptance_and_the_cost_of_a_position():
    cheap = GrammarDrafter(verify_cost=lambda: 0.05)  # an AMX CPU: a verified position costs ~5% of a step

    def encode(text):  # one token per character
        return list(range(len(text)))

    assert cheap.propose("r", "abcdef", encode, 12) == [0, 1, 2, 3, 4]
    for _ in range(10):  # the target keeps writing something else
        cheap.verified("r", 5, 0)
    assert len(cheap.propose("r", "abcdef", encode, 12)) <= 1  # one draft still pays at 5% a position
    assert cheap.propose("new", "abcdef", encode, 12) == [0, 1, 2, 3, 4]  # another request starts fresh
    # where a verified position costs as much as a step (an AVX2-only CPU in bf16), none pays
    assert GrammarDrafter(verify_cost=lambda: 1.0).propose("r", "abcdef", encode, 12) == []
    cheap.forget({"new": object()})
    assert "r" not in cheap.history


def test_the_targets_own_spelling_of_a_forced_text_is_learnt_and_drafted():
    pieces = {1: "i", 2: "n", 3: "voice", 4: "_", 5: "id", 6: '":', 7: " ", 8: "in", 9: "vend", 10: "or"}
    text_of = pieces.__getitem__
    spellings = Spellings()
    assert not spellings.learn('invoice_id"', [1, 2, 3], text_of)  # not written that far yet
    assert spellings.learn('invoice_id"', [1, 2, 3, 4, 5, 6, 7], text_of)  # '":' runs past the forced text
    assert spellings.get('invoice_id"') == (1, 2, 3, 4, 5)
    assert spellings.get('voice_id"') == (3, 4, 5)  # what is left once "in" is written
    drafter = GrammarDrafter(verify_cost=lambda: 0.05, spellings=spellings)

    def tokenizer_split(text):  # the tokenizer's "in" is not how the target writes it
        return [8, 3, 4, 5, 6]

    assert drafter.propose("r", 'invoice_id"', tokenizer_split, 12) == [1, 2, 3, 4, 5]
    assert drafter.propose("r", 'vendor"', tokenizer_split, 12) == [8, 3, 4, 5]  # never seen: the tokenizer's
    # watched while written, step by step
    drafter.watch("s", 10, 'vendor"')
    drafter.written("s", [0] * 10 + [9], text_of)
    assert "s" in drafter.writing
    drafter.written("s", [0] * 10 + [9, 10, 6], text_of)
    assert "s" not in drafter.writing and drafter.spellings.get('vendor"') == (9, 10)
    assert Spellings().learn('vendor"', [6], text_of)  # a token past the forced text at once: nothing to learn
    ended = Spellings()
    assert ended.learn('id"', [5, 11, 6], {**pieces, 11: '"'}.__getitem__)
    assert ended.get('id"') == (5,)  # a token that ends the forced text may be merged next time: not drafted
    assert ended.get('"') is None


def test_a_forced_texts_encoding_is_asked_of_the_tokenizer_once(tokenizer):
    from dspark_serve.grammar_drafts import TokenTexts

    calls = []

    class Counting:
        def encode(self, text, add_special_tokens):
            calls.append(text)
            return tokenizer.encode(text, add_special_tokens=add_special_tokens)

    texts = TokenTexts(Counting())
    first = texts.encode('invoice_id"')
    first.append(-1)  # a caller's list is its own: the kept encoding is not changed through it
    assert texts.encode('invoice_id"') == tokenizer.encode('invoice_id"', add_special_tokens=False)
    assert calls == ['invoice_id"']
