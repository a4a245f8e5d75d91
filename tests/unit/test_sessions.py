"""Agent sessions (scenarios.session): the shipped generator, a user's session file and its errors, the
session metrics, and sessions run by the sweep's users against a fake server."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from dspark_bench.loadtests.config import load_config
from dspark_bench.loadtests.metrics import level_metrics, session_metrics
from dspark_bench.loadtests.records import RequestRecord, read_records
from dspark_bench.loadtests.results import load_results
from dspark_bench.loadtests.sweep import run_sweep
from dspark_bench.reports.tables import session_lines
from dspark_bench.scenarios import Mode, ScenarioError, Split, load_scenario
from dspark_bench.scenarios.session import SessionScenario
from tests.conftest import start_fake_stream_server

WEATHER = {"name": "get_weather", "description": "Weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}  # fmt: skip


def _session_line(**fields) -> str:
    session = {"tools": [WEATHER], "turns": [{"content": "Weather in Paris?", "tool": "get_weather", "arguments": {"city": "Paris"},
                                              "result": {"sky": "sunny"}}, {"content": "And in Rome?", "tool": "get_weather"}]}  # fmt: skip
    return json.dumps({**session, **fields}) + "\n"


def test_shipped_sessions_call_tools_turn_after_turn_with_each_result_folded_into_the_next():
    scenario = load_scenario("agent_sessions")
    for sample in scenario.samples(Split.EVAL, 20):
        assert 2 <= len(sample.turns) <= 3 and sample.max_tokens == 160
        assert sample.turns[0].message.startswith("You can call these tools:")
        for previous, turn in zip(sample.turns, sample.turns[1:], strict=False):
            assert turn.message.startswith(f"{previous.tool} returned: {{")  # the last tool's result first
            assert "You can call these tools" not in turn.message
        for turn in sample.turns:
            assert not list(Draft202012Validator(turn.schema).iter_errors(turn.expected))
        assert len({turn.tool for turn in sample.turns}) == len(sample.turns)  # a different tool each turn
    first = scenario.sample(1_000_000)
    history = [{"role": "user", "content": first.turns[0].message}, {"role": "assistant", "content": "{}"}]
    request = first.turn_request(1, history)
    assert request.messages == [*history, {"role": "user", "content": first.turns[1].message}]
    assert request.schema == first.turns[1].schema and request.answer == first.turns[1].expected and not request.turns
    assert request.response_format(Mode.JSON_SCHEMA)["json_schema"]["schema"] == first.turns[1].schema


def test_the_example_session_file_loads():
    scenario = load_scenario("examples/sessions.jsonl")
    assert isinstance(scenario, SessionScenario) and scenario.distinct_prompts == 3 and Mode.JSON_SCHEMA in scenario.modes
    assert [len(scenario.sample(n).turns) for n in range(3)] == [3, 2, 2]


def test_a_session_file_loads_with_or_without_a_byte_order_mark_and_openai_tools(tmp_path):
    path = tmp_path / "sessions.jsonl"
    openai_tools = [{"type": "function", "function": WEATHER}]
    path.write_text(_session_line() + _session_line(tools=openai_tools, tags=["travel"], max_tokens=99), encoding="utf-8-sig")
    scenario = load_scenario(path)
    assert isinstance(scenario, SessionScenario) and scenario.distinct_prompts == 2
    assert Mode.JSON_SCHEMA in scenario.modes  # every turn names a tool: its parameters are the schema
    first, second = scenario.sample(0), scenario.sample(1)
    assert first.turns == second.turns and second.tags == ("travel",) and second.max_tokens == 99
    assert "get_weather returned: {\"sky\": \"sunny\"}" in first.turns[1].message
    assert first.turns[1].expected is None and first.turns[0].expected == {"city": "Paris"}


@pytest.mark.parametrize(
    ("line", "field", "fix"),
    [
        ('{"turns": []}', "line 1: turns", "write \"turns\""),
        ('{"turns": [{"tool": "get_weather"}]}', "line 1: turns[0].content", "the user's request"),
        ('{"turns": [{"content": "hi", "tool": "nope"}]}', "line 1: turns[0].tool", "add a tools list"),
        ('{"tools": [{"description": "x"}], "turns": [{"content": "hi"}]}', "line 1: tools[0]", '"name"'),
        ('{"turns": [{"content": "hi", "reply": 1}]}', "line 1: turns[0].reply", "use content, tool"),
        ('{"turns": [{"content": "hi"}], "tool": "x"}', "line 1: tool", "use tools, turns"),
        (_session_line(turns=[{"content": "hi", "tool": "get_weather", "arguments": {"town": 1}}]).strip(),
         "line 1: turns[0].arguments", "correct the arguments"),
        (_session_line(turns=[{"content": "hi", "tool": "get_weather", "schema": {}}]).strip(), "line 1: turns[0]", "keep one"),
        ('{"turns": [{"content": "hi", "schema": {"$ref": "#/$defs/x"}}]}', "line 1: turns[0].schema", "$ref"),
        ('{"turns": [{"content": "hi"}], "max_tokens": 0}', "line 1: max_tokens", "256"),
        ('{"turns": [{"content": "hi"}], "tags": "travel"}', "line 1: tags", '["travel"]'),
    ],
)
def test_a_bad_session_line_is_one_error_naming_its_line_field_and_fix(tmp_path, line, field, fix):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert caught.value.field_name == field and fix in str(caught.value) and "\n" not in str(caught.value)


def _turn(session: str, turn: int, turns: int, verdict: str = "valid", cached: int | None = None) -> RequestRecord:
    return RequestRecord("a", 1, "s", "json_schema", f"{session}.t{turn}", 0, 0, False, 0.0, 0.5, 1.0, 10, 5, "stop", 200,
                         None, "{}", verdict, cached_tokens=cached, session=session, turn=turn, turns=turns)  # fmt: skip


def test_session_metrics_count_ended_sessions_success_turns_and_cache_by_turn():
    records = [
        *(_turn("s1", n, 3, cached=c) for n, c in enumerate((0, 8, 9))),  # three valid turns: a success
        _turn("s2", 0, 3, cached=0), _turn("s2", 1, 3, "schema_violation", cached=6),  # ended by a bad answer
        _turn("s3", 0, 2, cached=2),  # still under way: not counted
    ]
    figures = session_metrics(records)
    assert figures["sessions"] == 2 and figures["session_success_rate"] == 0.5 and figures["turns_per_session"] == 2.5
    assert figures["cached_prompt_share_by_turn"] == [0.0, 0.7, 0.9]  # (8 + 6) / 20, 9 / 10
    metrics = level_metrics(records)
    assert metrics.sessions == 2 and metrics.requests == 6  # every turn is a request of its own
    assert metrics.cached_prompt_share == pytest.approx(25 / 60)
    assert session_metrics([_turn("s3", 0, 2)]) == {} and level_metrics(records[:1]).sessions is None


def test_sessions_run_by_the_sweep_send_the_conversation_so_far_and_end_at_a_bad_answer(tmp_path):
    # the fake server always answers {"a": 1, "b": "xy"}: valid for any JSON, a violation of "needs c"
    needs_c = {"type": "object", "required": ["c"]}
    lines = [
        json.dumps({"turns": [{"content": f"one {i}"}, {"content": "two"}, {"content": "three"}]}) for i in range(3)
    ] + [json.dumps({"turns": [{"content": "one"}, {"content": "two", "schema": needs_c}, {"content": "three"}]})]
    dataset = tmp_path / "sessions.jsonl"
    dataset.write_text("\n".join(lines) + "\n")
    url, server = start_fake_stream_server("--tokens", "7", "--token-ms", "1")
    try:
        config = load_config(None, arms="baseline-constrained", urls={"baseline-constrained": url}, scenarios=str(dataset),
                             levels=[2], requests_per_level=8, warmup_requests=0, output_dir=str(tmp_path), run_name="s")  # fmt: skip
        results = run_sweep(config, tmp_path / "s")
    finally:
        server.kill()
        server.wait()
    assert results.complete
    records = [r for r in read_records(tmp_path / "s") if not r.tail]
    by_session: dict[str, list[RequestRecord]] = {}
    for record in records:
        by_session.setdefault(str(record.session), []).append(record)
    assert len(by_session) == 8  # the level's 8 tickets are sessions, not requests
    for turns in by_session.values():
        turns.sort(key=lambda r: r.turn or 0)
        # each turn sends the conversation so far: 1, 3, 5 messages (the fake server's prompt tokens)
        assert [r.prompt_tokens for r in turns] == [1, 3, 5][: len(turns)]
        assert [r.request_id.rsplit(".", 1)[1] for r in turns] == [f"t{n}" for n in range(len(turns))]
        if turns[1].verdict != "valid":  # the session asking for "c" ends at its second turn
            assert len(turns) == 2 and turns[1].verdict == "schema_violation"
        else:
            assert len(turns) == 3
    [level] = load_results(tmp_path / "s").levels
    assert level.metrics.sessions == 8 and level.metrics.session_success_rate == 0.75  # 2 of 8 sessions ask for "c"
    assert level.metrics.cached_prompt_share_by_turn == [0.0, pytest.approx(2 / 3), pytest.approx(4 / 5)]
    assert "75% succeeded" in "\n".join(session_lines(results))
