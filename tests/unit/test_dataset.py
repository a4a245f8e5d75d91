"""Dataset scenarios: a user's own requests from JSONL, JSON, CSV, JSONSchemaBench entries or a YAML that
names a file; every bad line gives its number, the field and the fix."""

import json

import pytest

from dspark_bench.loadtests.config import ConfigError, load_config
from dspark_bench.scenarios import Mode, ScenarioError, Split, load_scenario

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def _jsonl(tmp_path, *rows, name="mine.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_the_shipped_example_runs_as_a_scenario():
    scenario = load_scenario("examples/requests.jsonl")
    assert scenario.name == "requests" and scenario.is_json and Mode.JSON_SCHEMA in scenario.modes
    samples = list(scenario.samples(Split.EVAL, 120, offset=0))
    assert samples[0].messages == samples[50].messages and samples[0].seed != samples[50].seed  # cycles, ids stay unique
    assert {t for s in samples for t in s.tags} == {"invoice", "ticket", "urgent", "routine"}
    assert all(s.response_format(Mode.JSON_SCHEMA)["json_schema"]["schema"] == s.schema for s in samples)
    assert all(s.response_format(Mode.PROMPT) is None for s in samples)
    assert {s.max_tokens for s in samples} == {96, 128}


def test_each_line_keeps_what_it_gives(tmp_path):
    path = _jsonl(
        tmp_path,
        {"prompt": "p1", "schema": SCHEMA, "answer": {"a": 1}},
        {"messages": [{"role": "user", "content": "p2"}], "response_format": {"type": "json_object"}},
        {"prompt": "p3", "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}},
    )
    one, two, three = load_scenario(path).samples(Split.EVAL, 3)
    assert one.response_format(Mode.JSON_OBJECT) == {"type": "json_object"} and one.answer == {"a": 1}
    assert two.response_format(Mode.JSON_SCHEMA) == {"type": "json_object"} and two.schema is None  # the line's own format wins
    assert three.schema == SCHEMA and three.response_format(Mode.JSON_OBJECT)["type"] == "json_schema"


def test_free_text_lines(tmp_path):
    scenario = load_scenario(_jsonl(tmp_path, {"prompt": "say hi", "answer": "hi"}, {"prompt": "say bye"}))
    assert not scenario.is_json and scenario.modes == (Mode.TEXT,)
    assert next(scenario.samples(Split.EVAL, 1)).response_format(Mode.TEXT) == {"type": "text"}


BAD_LINES = [
    ("not json at all", "line 2: (line)"),
    ({"messages": []}, "line 2: messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "line 2: messages"),
    ({"prompt": ""}, "line 2: prompt"),
    ({"prompt": "x", "messages": [{"role": "user", "content": "y"}]}, "line 2: messages"),
    ({"answer": 1}, "line 2: messages"),
    ({"prompt": "x", "schema": {"type": "nope"}}, "line 2: schema"),
    ({"prompt": "x", "schema": SCHEMA, "answer": {"a": "one"}}, "line 2: answer"),
    ({"prompt": "x", "response_format": {"type": "xml"}}, "line 2: response_format"),
    ({"prompt": "x", "response_format": {"type": "json_schema"}}, "line 2: response_format"),
    ({"prompt": "x", "max_tokens": 0}, "line 2: max_tokens"),
    ({"prompt": "x", "tags": {"a": 1}}, "line 2: tags"),
    ({"prompt": "x", "tags": "meeting"}, "line 2: tags"),  # a string, not a list: refused, with ["meeting"] as the fix
    ({"prompt": "x", "schema": {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}}, "line 2: schema"),
    ({"prompt": "x", "schema": {"$ref": "#"}}, "line 2: schema"),  # the shortest loop
    ({"prompt": "x", "schema": {"allOf": [{"$ref": "#"}]}}, "line 2: schema"),
    ({"prompt": "x", "schema": {"$ref": "#/$defs/missing"}}, "line 2: schema"),
    ({"prompt": "x", "schema": {"$ref": "https://example.com/s.json"}}, "line 2: schema"),
    ({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#"}}}}, "line 2: response_format"),
    ({"prompt": "x", "colour": "red"}, "line 2: colour"),
    ([1, 2], "line 2: (line)"),
]


@pytest.mark.parametrize(("bad", "where"), BAD_LINES, ids=[w + str(i) for i, (_, w) in enumerate(BAD_LINES)])
def test_a_bad_line_names_its_number_field_and_fix(tmp_path, bad, where):
    path = _jsonl(tmp_path, {"prompt": "fine", "schema": SCHEMA}, bad)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert where in message and "fix:" in message and "\n" not in message, message
    with pytest.raises(ConfigError, match=where.replace("(", r"\(").replace(")", r"\)")):
        load_config(scenarios=str(path))  # nothing starts: the run's config check refuses it


def test_mixed_text_and_json_is_refused(tmp_path):
    with pytest.raises(ScenarioError, match="mixed"):
        load_scenario(_jsonl(tmp_path, {"prompt": "a", "schema": SCHEMA}, {"prompt": "b"}))


def test_csv_json_list_jsonschemabench_and_yaml(tmp_path):
    csv_path = tmp_path / "mine.csv"
    csv_path.write_text('prompt,schema,answer,tags\n"give a","{""type"": ""object""}","{""a"": 1}",x;y\n', encoding="utf-8")
    sample = next(load_scenario(csv_path).samples(Split.EVAL, 1))
    assert sample.answer == {"a": 1} and sample.tags == ("x", "y") and sample.is_json
    json_path = tmp_path / "mine.json"
    json_path.write_text(json.dumps([{"prompt": "a", "schema": SCHEMA}, {"prompt": "b", "schema": SCHEMA}]), encoding="utf-8")
    assert [s.messages[0]["content"] for s in load_scenario(json_path).samples(Split.EVAL, 2)] == ["a", "b"]
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "one.json").write_text(json.dumps({"schema": SCHEMA, "tests": [{"valid": True, "data": {"a": 1}}]}), encoding="utf-8")
    entry = next(load_scenario(bench).samples(Split.EVAL, 1))
    assert entry.schema == SCHEMA and "JSON Schema" in entry.messages[0]["content"]
    assert entry.response_format(Mode.JSON_SCHEMA)["type"] == "json_schema"
    yaml_path = tmp_path / "scenario.yaml"
    yaml_path.write_text("dataset: mine.json\nname: my_requests\n", encoding="utf-8")
    assert load_scenario(yaml_path).name == "my_requests"


def test_a_recursive_schema_that_consumes_the_value_is_fine_and_a_byte_order_mark_is_read(tmp_path):
    """A tree refers to itself through its children (each step validates a smaller value): no loop. A file
    saved with a UTF-8 byte-order mark (Excel, many Windows tools) reads like any other."""
    tree = {"type": "object", "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}},
            "$defs": {"leaf": {"$ref": "#/$defs/node"}, "node": {"type": "string", "$anchor": "n"}, "by_anchor": {"$ref": "#n"},
                      "by_old_id": {"$ref": "#legacy"}, "old": {"id": "#legacy", "type": "integer"}},
            "default": {"$ref": "#/not/a/schema"}}  # fmt: skip
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"prompt": "a tree", "schema": tree, "answer": {"name": "r", "children": [{"name": "c"}]}}).encode())
    assert next(load_scenario(path).samples(Split.EVAL, 1)).schema == tree
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbfprompt,tags\nhello,a;b\n")
    assert next(load_scenario(tmp_path / "bom.csv").samples(Split.EVAL, 1)).tags == ("a", "b")


def test_a_schema_nested_hundreds_deep_is_one_line_not_a_traceback(tmp_path):
    deep: dict = {"type": "string"}
    for _ in range(400):
        deep = {"type": "object", "properties": {"x": deep}}
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps({"prompt": "x", "schema": deep}) + "\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match="line 1: schema.*nests deeper"):
        load_scenario(path)


def test_a_line_that_is_not_utf8_is_named_with_its_byte(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"prompt": "fine"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(ScenarioError, match=r"line 2: \(line\).*not UTF-8 \(byte 0xe9 at column 16\).*save the file as UTF-8"):
        load_scenario(str(path))


def test_a_key_written_twice_is_refused_not_silently_dropped(tmp_path):
    path = tmp_path / "twice.jsonl"
    path.write_text('{"prompt": "a", "max_tokens": 10, "max_tokens": 20}\n', encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"line 1: .*'max_tokens' written twice"):
        load_scenario(str(path))
