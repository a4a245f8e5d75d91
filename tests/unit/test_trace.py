"""Trace replay: the published formats read as published, bad lines named, and a replay that sends at the
trace's own times."""

import json

import pytest

from dspark_bench.loadtests.config import ConfigError, load_config
from dspark_bench.loadtests.records import read_records
from dspark_bench.loadtests.sweep import run_sweep
from dspark_bench.scenarios import Mode, ScenarioError, Split, TraceScenario, load_scenario
from dspark_bench.scenarios.trace import SYNTHETIC_SCHEMA, synthetic_prompt


def _jsonl(path, rows):
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def test_a_mooncake_trace_reads_as_published(tmp_path):
    trace = load_scenario(_jsonl(tmp_path / "mooncake.jsonl", [
        {"timestamp": 0, "input_length": 600, "output_length": 40, "hash_ids": [7, 8]},
        {"timestamp": 500, "input_length": 300, "output_length": 90, "hash_ids": [7]},
        {"timestamp": 2000, "input_length": 50, "output_length": 10, "hash_ids": [9]},
    ]))  # fmt: skip
    assert isinstance(trace, TraceScenario) and trace.offsets_s == (0.0, 0.5, 2.0) and trace.rate == 1.0
    first, second, third = (trace.sample(seed) for seed in range(3))
    assert [s.max_tokens for s in (first, second, third)] == [40, 90, 10]  # output_length
    assert first.schema == SYNTHETIC_SCHEMA and Mode.JSON_SCHEMA in trace.modes
    lengths = [len(s.messages[0]["content"].split()) for s in (first, second, third)]
    assert [abs(n - want) <= 2 for n, want in zip(lengths, (600, 300, 50), strict=True)] == [True] * 3  # a word a token
    # a shared leading hash id is a shared prefix; another id is other text
    a, b, c = (s.messages[0]["content"] for s in (first, second, third))
    assert a[:1000] == b[:1000] and a[:200] != c[:200]


def test_an_azure_trace_reads_as_published(tmp_path):
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
        "2023-11-16 18:15:51.1805900,879,55\n"
    )
    trace = load_scenario(path)
    assert isinstance(trace, TraceScenario) and len(trace.rows) == 3
    assert trace.offsets_s == pytest.approx((0.0, 4.314579, 4.5)) and trace.sample(1).max_tokens == 109


def test_a_trace_of_the_users_own_requests(tmp_path):
    trace = load_scenario(_jsonl(tmp_path / "own.jsonl", [
        {"timestamp": 0, "prompt": "Extract the order as JSON: 2 apples", "schema": {"type": "object"}, "tags": ["a"]},
        {"timestamp": 250.5, "messages": [{"role": "user", "content": "Same: 3 pears"}], "response_format": {"type": "json_object"}},
    ]))  # fmt: skip
    assert trace.offsets_s == (0.0, 0.2505) and trace.sample(0).tags == ("a",) and trace.sample(1).explicit_format == {"type": "json_object"}


def test_trace_rows_may_name_a_request_of_a_scenario_or_dataset_by_index(tmp_path):
    (tmp_path / "mine.jsonl").write_text('{"prompt": "first", "schema": {"type": "object"}}\n{"prompt": "second", "schema": {"type": "object"}}\n')
    trace = load_scenario(_jsonl(tmp_path / "indexed.jsonl", [
        {"timestamp": 0, "scenario": "order_extraction", "index": 7},
        {"timestamp": 500, "scenario": "mine.jsonl", "index": 1},
    ]))  # fmt: skip
    order = load_scenario("order_extraction").sample(load_scenario("order_extraction").splits[Split.EVAL][0] + 7)
    assert trace.sample(0).messages == order.messages and trace.sample(0).schema == order.schema and trace.sample(0).answer == order.answer
    assert trace.sample(1).messages[0]["content"] == "second" and trace.offsets_s == (0.0, 0.5)


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ({"timestamp": 100, "scenario": "mine.jsonl", "index": 0}, "line 2: scenario"),  # no such file
        ({"timestamp": 100, "scenario": "order_extraction", "index": -1}, "line 2: index"),
        ({"timestamp": 100, "scenario": "agent_sessions", "index": 0}, "line 2: scenario"),
        ({"timestamp": "soon", "input_length": 10, "output_length": 5}, "line 2: timestamp"),
        ({"timestamp": 100, "input_length": -3, "output_length": 5}, "line 2: input_length"),
        ({"timestamp": 100, "input_length": 10, "output_length": 5, "hash_ids": ["a"]}, "line 2: hash_ids"),
        ({"timestamp": 100, "input_length": 10}, "line 2: output_length"),
        ({"timestamp": 0.5, "input_length": 10, "output_length": 5}, "line 2: timestamp"),  # earlier than line 1
        ({"timestamp": 100, "prompt": ""}, "line 2: prompt"),
        ("{not json", "line 2: (line)"),
    ],
)
def test_a_bad_trace_line_names_its_number_and_field(tmp_path, line, field):
    path = _jsonl(tmp_path / "bad.jsonl", [{"timestamp": 1, "input_length": 10, "output_length": 5}, line])
    with pytest.raises(ScenarioError, match="fix:") as raised:
        load_scenario(path)
    assert raised.value.field_name == field


def test_synthetic_prompts_are_deterministic():
    assert synthetic_prompt(100, [3], 0) == synthetic_prompt(100, [3], 5)  # the block, not the row, decides
    assert synthetic_prompt(100, [], 0) != synthetic_prompt(100, [], 1)


def test_trace_settings_make_one_open_loop_level(tmp_path):
    path = _jsonl(tmp_path / "t.jsonl", [{"timestamp": 1000 * i, "input_length": 20, "output_length": 8} for i in range(5)])
    config = load_config(None, trace=str(path), trace_speed=2)
    assert config.rates == (2.0,) and config.requests_per_level == 5 and config.warmup_requests == 0
    assert config.scenarios == (str(path),)
    with pytest.raises(ConfigError, match="drop --workers"):
        load_config(None, trace=str(path), workers=2)
    with pytest.raises(ConfigError, match="drop --rate"):
        load_config(None, trace=str(path), rates=[4.0])
    with pytest.raises(ConfigError, match="trace_speed"):
        load_config(None, trace=str(path), trace_speed=0)
    plain = _jsonl(tmp_path / "plain.jsonl", [{"prompt": "hi", "schema": {"type": "object"}}])
    with pytest.raises(ConfigError, match="no arrival times"):
        load_config(None, trace=str(plain))


def test_a_replay_sends_each_request_at_the_traces_time(fast_server, tmp_path):
    gaps_ms = [0, 40, 40, 40, 600, 40, 40, 700, 20, 20, 20, 20, 400, 100, 100, 100, 100, 100, 100, 100]  # bursts, pauses
    times, at = [], 0
    for gap in gaps_ms:
        at += gap
        times.append(at)
    path = _jsonl(tmp_path / "t.jsonl", [{"timestamp": t, "input_length": 30, "output_length": 12} for t in times])
    config = load_config(None, arms="baseline-constrained", urls={"baseline-constrained": fast_server}, trace=str(path),
                         trace_speed=1.5, output_dir=str(tmp_path), run_name="replay")  # fmt: skip
    results = run_sweep(config, tmp_path / "replay")
    assert results.complete
    records = sorted(read_records(tmp_path / "replay"), key=lambda r: r.t_scheduled)
    assert len(records) == 20 and not any(r.warmup for r in records)
    due = [r.t_scheduled - records[0].t_scheduled for r in records]
    assert due == pytest.approx([t / 1000 / 1.5 for t in times], abs=1e-6)  # the trace's clock, 1.5x faster
    assert max(r.t_send - r.t_scheduled for r in records) < 0.1  # each sent when due
    [level] = results.levels
    assert level.metrics.achieved_rate == pytest.approx(level.level, rel=0.1)


def test_token_lengths_count_in_the_run_models_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    from dspark_bench.loadtests.config import DEFAULT_MODEL

    lengths = [(70, 5), (260, 12), (611, 3)]  # at least the JSON instruction and the chat template (~55 here)
    path = _jsonl(tmp_path / "t.jsonl", [{"timestamp": 10 * i, "input_length": n, "output_length": m, "hash_ids": [i, 99]}
                                         for i, (n, m) in enumerate(lengths)])  # fmt: skip
    config = load_config(None, trace=str(path))
    trace = config.scenario(config.trace)
    tokenizer = AutoTokenizer.from_pretrained(DEFAULT_MODEL)
    for seed, (want, _) in enumerate(lengths):
        text = tokenizer.apply_chat_template(trace.sample(seed).messages, tokenize=False, add_generation_prompt=True)
        assert len(tokenizer.encode(text, add_special_tokens=False)) == want  # the server's prompt_tokens
