"""The embedded model's broad training text: made-up records and JSONSchemaBench documents (models/records.py).

What the model learns from them must be learnable and must not leak the benchmark: every value of a record's
answer is written in its prompt, the answer is compact JSON, and the JSONSchemaBench subset the benchmark
runs on (JME) never reaches the training text.
"""

import json
import random
import re
from pathlib import Path

import pytest

from models import corpus, records
from models.corpus import DEFAULT_SCHEMA_PAIRS as CORPUS
from models.extraction import UNITS
from models.records import HELD_OUT_SUBSETS, record_example, record_pair, schema_pairs


def test_every_answer_value_is_written_in_the_prompt():
    for seed in range(300):
        messages, record = record_example(random.Random(seed))
        prompt = "\n".join(m["content"] for m in messages)
        assert record, seed
        for name, value in record.items():
            assert name in prompt, (seed, name)
            written = ("yes" if value else "no") if isinstance(value, bool) else str(value)
            assert written in prompt, (seed, name, value)


def test_records_are_deterministic_compact_and_varied():
    assert record_pair(7) == record_pair(7)
    answers = [record_pair(seed)[1] for seed in range(200)]
    assert all(a == records.compact(json.loads(a)) for a in answers)
    keys = {k for a in answers for k in json.loads(a)}
    assert len(keys) > 150  # field names from broad word lists, not a handful of schemas


def test_mix_is_a_distribution_over_known_sources():
    assert abs(sum(corpus.MIX.values()) - 1.0) < 1e-9
    assert {"records", "jsonschemabench", "extraction"} <= set(corpus.MIX)


def _entry(tmp: Path, subset: str, name: str, schema: dict, tests: list[dict]) -> None:
    (tmp / subset).mkdir(parents=True, exist_ok=True)
    (tmp / subset / name).write_text(json.dumps({"schema": schema, "tests": tests}), encoding="utf-8")


def test_schema_pairs_hold_out_jme_and_take_valid_documents_only(tmp_path):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    _entry(tmp_path, "Github_easy", "x.json", schema, [{"valid": True, "data": {"a": 1}}, {"valid": False, "data": {"a": "no"}}])
    _entry(tmp_path, "JME", "y.json", schema, [{"valid": True, "data": {"a": 2}}])
    big = {"type": "object", "description": "x" * records.MAX_SCHEMA_CHARS}
    _entry(tmp_path, "Github_easy", "z.json", big, [{"valid": True, "data": {}}])
    pairs = list(schema_pairs(tmp_path))
    assert [answer for _, answer in pairs] == ['{"a":1}']
    assert "Produce one JSON document" in pairs[0][0][0]["content"]
    out = tmp_path / "pairs.jsonl"
    assert records.write_schema_pairs(tmp_path, out) == 1
    assert records.read_schema_pairs(out) == pairs


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/datasets/jsonschemabench is not beside this checkout")
def test_no_held_out_schema_reaches_the_training_text():
    held_out = {
        json.dumps(json.loads(p.read_text(encoding="utf-8"))["schema"], ensure_ascii=False)
        for subset in HELD_OUT_SUBSETS
        for p in (CORPUS / subset).glob("*.json")
    }
    assert len(held_out) > 50
    prompts = {messages[0]["content"] for messages, _ in schema_pairs(CORPUS)}
    assert len(prompts) > 1000
    assert not any(schema in prompt for prompt in prompts for schema in held_out if len(schema) > 200)


def _examples(count: int):
    from models.extraction import extraction_example

    return [extraction_example(random.Random(seed)) for seed in range(count)]


def _copied(value, spec: dict, prompt: str) -> bool:
    """Every string the answer holds is in the prompt as written (dates, numbers and booleans are written as
    people write them, and the answer normalises them)."""
    if isinstance(value, dict):
        return all(_copied(value[k], spec["properties"][k], prompt) for k in value)
    if isinstance(value, list):
        return all(_copied(item, spec["items"], prompt) for item in value)
    return not (spec.get("type") == "string" and "format" not in spec) or value in prompt


def test_extraction_answers_meet_their_schemas_and_copy_the_texts_values():
    from jsonschema import Draft202012Validator, FormatChecker

    for messages, answer, schema in _examples(500):
        Draft202012Validator(schema, format_checker=FormatChecker()).validate(answer)
        assert _copied(answer, schema, "\n".join(m["content"] for m in messages)), (messages, answer)


def test_extraction_examples_cover_the_shapes_a_users_schema_has():
    from models.extraction import extraction_pair

    seen: set[str] = set()
    for messages, answer, schema in _examples(400):
        for name, spec in schema["properties"].items():
            seen.add(spec.get("type") or "enum")
            if spec.get("type") == "array":
                seen.add("array of objects" if spec["items"].get("type") == "object" else "array of labels")
            if "format" in spec:
                seen.add(spec["format"])
            if name not in answer:
                seen.add("optional left out")
        if "matching this schema" in messages[-1]["content"]:
            seen.add("schema in the prompt")
        text = messages[-1]["content"]
        if re.search(r"\S \([a-z ]+\)(\.|;|$)", text, re.M):
            seen.add("value before its label")  # field notes: "HZ-66469 (last reference)"
        if re.search(r"(^|\. )(By|At|In|On|Dated) \S|\. It was \S| handled it\.| signed off\.", text):
            seen.add("value without its label")  # a report: "By Ana Costa.", "On 3 May 2026."
        for name, spec in schema["properties"].items():
            if spec.get("type") == "integer" and spec.get("maximum") in (5, 10) and re.search(rf"\b{answer.get(name)}( of |/| out of )(5|10)\b", text):
                seen.add("rating on a scale")  # "3/5" -> 3
            unit = next((u for suffix, u in UNITS if re.search(rf"(_|[a-z]){suffix}$", name, re.I)), None)
            if unit and name in answer and re.search(re.escape(f"{answer[name]}{unit}".replace(".", ",")).replace(",", "[.,]"), text):
                seen.add("unit beside the value")  # "weight_kg" from "12.7 kg"
            items = answer.get(name) if spec.get("type") == "array" else None
            if items and isinstance(items[0], dict):
                part, value = next(iter(items[0].items()))  # a string: a name, code or description
                if f"{value}, " in text and f"{part} {value}" not in text:
                    seen.add("items without labels")  # "atlas, 111, 2580.3; nova, 2, 19.5"
        known = {w.lower() for w in records.WORDS + records.FIRST + records.LAST + records.CITIES}
        strings = [v for k, v in answer.items() if schema["properties"][k] == {"type": "string"} and re.fullmatch(r"[A-Za-z ]+", v)]
        if any(not set(v.lower().split()) & known for v in strings):
            seen.add("made-up words")  # names and places no word list holds: copied, not recalled
    assert {"string", "integer", "number", "boolean", "enum", "object", "array of objects", "array of labels", "date",
            "optional left out", "schema in the prompt", "value before its label", "value without its label",
            "made-up words", "rating on a scale", "unit beside the value", "items without labels"} <= seen, seen  # fmt: skip
    assert extraction_pair(11) == extraction_pair(11)
    answers = [extraction_pair(seed)[1] for seed in range(100)]
    assert all(a == records.compact(json.loads(a)) for a in answers)


def _json_part(text: str):
    start = min(i for i in (text.find("{"), text.find("[")) if i >= 0)
    return json.JSONDecoder().raw_decode(text, start)[0]


@pytest.mark.parametrize("source", ["order_extraction", "tool_call", "records", "extraction"])
def test_a_share_of_json_answers_is_learned_as_a_grammar_gives_it(source):
    from models.corpus import _pairs_for, _tokenized_for
    from models.tokenizer import load_tokenizer
    from models.train import TOKENIZER_DIR

    tok = load_tokenizer(TOKENIZER_DIR)
    backend, eos = tok.backend_tokenizer, tok.convert_tokens_to_ids(tok.eos_token)
    job = (source, 0, 200, "unused: no JSONSchemaBench source here")
    rows, pairs = _tokenized_for((*job, str(TOKENIZER_DIR))), _pairs_for(job)
    assert rows == _tokenized_for((*job, str(TOKENIZER_DIR)))  # deterministic
    kinds = {"as written": 0, "after whitespace": 0, "resplit": 0}
    for (prompt, answer), pair in zip(rows, pairs, strict=True):
        assert answer[-1] == eos
        rendered = tok.apply_chat_template(pair.messages, tokenize=False, add_generation_prompt=True)
        canonical_prompt = backend.encode(rendered, add_special_tokens=False).ids
        canonical_answer = backend.encode(pair.completion, add_special_tokens=False).ids
        if prompt != canonical_prompt:  # the answer's start and stray whitespace joined the prompt
            assert prompt[: len(canonical_prompt)] == canonical_prompt
            written = backend.decode(prompt[len(canonical_prompt) :] + answer[:-1])
            said, rest = backend.decode(prompt[len(canonical_prompt) :]), backend.decode(answer[:-1])
            assert said != said.rstrip() and rest == rest.lstrip()  # the model learns what comes after it, not it
            assert written != pair.completion and _json_part(written) == _json_part(pair.completion)
            kinds["after whitespace"] += 1
        elif answer[:-1] != canonical_answer:
            assert backend.decode(answer[:-1]) == pair.completion and len(answer) > len(canonical_answer) + 1
            kinds["resplit"] += 1
        else:
            kinds["as written"] += 1
    assert 0.05 <= kinds["after whitespace"] / 200 <= 0.3 and 0.05 <= kinds["resplit"] / 200 <= 0.3, kinds


def test_prose_answers_are_learned_as_written():
    from models.corpus import _pairs_for, _tokenized_for
    from models.tokenizer import load_tokenizer
    from models.train import TOKENIZER_DIR

    backend = load_tokenizer(TOKENIZER_DIR).backend_tokenizer
    job = ("freeform_qa", 0, 100, "unused")
    for (_prompt, answer), pair in zip(_tokenized_for((*job, str(TOKENIZER_DIR))), _pairs_for(job), strict=True):
        assert answer[:-1] == backend.encode(pair.completion, add_special_tokens=False).ids


def test_whitespace_stands_only_where_json_allows_it():
    from models.corpus import whitespace_cuts

    text = 'Here: {"a":"x, y","b":-12.5,"c":[true,null],"d":{}} done'
    offsets = [(c, c + 1) for c in range(len(text))]  # one character a token
    allowed = {text[:k][-8:] + "|" for k in whitespace_cuts(text, offsets)}
    start, end = text.index("{"), text.rindex("}") + 1
    assert all(start < k < end for k in whitespace_cuts(text, offsets))
    for inside in ('"x|', "x,|", "-1|", "12|", "2.|", "t|", "tr|", "nul|", "}}|"):
        assert not any(a.endswith(inside) for a in allowed), inside
    for between in ('{|', '"a"|', ':|', '",|', "5,|", "[|", "true|", "null]|", "{}|"):
        assert any(a.endswith(between) for a in allowed), between
    assert whitespace_cuts("no JSON here", [(0, 2)]) == []
