import json

from dspark_bench.loadtests.validate import Verdict, field_accuracy, leaves, validate, word_overlap

SCHEMA = {
    "type": "object",
    "properties": {
        "a": {"type": "integer"},
        "b": {"type": "array", "items": {"type": "string"}},
        "d": {"type": "string", "format": "date"},
    },
    "required": ["a"],
    "additionalProperties": False,
}


def test_valid_with_ground_truth():
    v = validate('{"a":1,"b":["x","y"]}', is_json=True, schema=SCHEMA, truth={"a": 1, "b": ["x", "z"]})
    assert v.verdict is Verdict.VALID
    assert v.field_accuracy == 2 / 3  # leaves /a, /b/0 right; /b/1 wrong
    assert v.exact_match is False


def test_parse_error():
    v = validate('{"a":1,', is_json=True, schema=SCHEMA, truth=None)
    assert v.verdict is Verdict.PARSE_ERROR and v.detail


def test_schema_violation_names_pointer_and_keyword():
    v = validate('{"a":1,"b":["x",3]}', is_json=True, schema=SCHEMA, truth=None)
    assert v.verdict is Verdict.SCHEMA_VIOLATION
    assert v.detail.startswith("/b/1: type:")
    v = validate('{"a":1,"c":2}', is_json=True, schema=SCHEMA, truth=None)
    assert "additionalProperties" in v.detail


def test_format_checks_are_on():
    assert validate('{"a":1,"d":"2024-02-30"}', is_json=True, schema=SCHEMA, truth=None).verdict is Verdict.SCHEMA_VIOLATION
    assert validate('{"a":1,"d":"2024-02-28"}', is_json=True, schema=SCHEMA, truth=None).verdict is Verdict.VALID


def test_truncated_http_and_timeout_take_precedence():
    assert validate("{", is_json=True, schema=SCHEMA, truth=None, finish_reason="length").verdict is Verdict.TRUNCATED
    assert validate("", is_json=True, schema=SCHEMA, truth=None, status=500).verdict is Verdict.HTTP_ERROR
    assert validate("", is_json=True, schema=SCHEMA, truth=None, error="boom").verdict is Verdict.HTTP_ERROR
    assert validate("", is_json=True, schema=SCHEMA, truth=None, timed_out=True).verdict is Verdict.TIMEOUT


def test_text_scenarios_score_overlap_not_json():
    v = validate("Mars is the red planet.", is_json=False, schema=None, truth="Mars is the fourth planet and the red planet.")
    assert v.verdict is Verdict.VALID
    assert 0.5 < v.field_accuracy < 1.0
    assert word_overlap("完全无关", "光合作用是植物") == 0.0


def test_field_accuracy_by_hand():
    truth = {"a": 1, "u": {"n": "x", "m": "y"}, "l": [1, 2]}
    assert leaves(truth) == {"/a": 1, "/u/n": "x", "/u/m": "y", "/l/0": 1, "/l/1": 2}
    assert field_accuracy({"a": 1.0, "u": {"n": "x"}, "l": [1, 3]}, truth) == 3 / 5
    assert field_accuracy(json.loads('{"a": true}'), {"a": 1}) == 0.0  # true is not 1
