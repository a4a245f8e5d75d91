import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator, FormatChecker

from dspark_bench.scenarios import Mode, ScenarioError, Split, builtin_names, load_all, load_scenario

DEFS = Path(__file__).resolve().parents[2] / "dspark_bench" / "scenarios" / "defs"


def test_every_builtin_scenario_loads():
    names = {s.name for s in load_all()}
    assert names == {"order_extraction", "review_sentiment", "tool_call", "freeform_qa", "agent_sessions"}
    assert set(builtin_names()) == names


@pytest.mark.parametrize("name", ["order_extraction", "review_sentiment", "tool_call", "freeform_qa", "agent_sessions"])
def test_generators_are_deterministic(name):
    scenario = load_scenario(name)

    def request(s):
        return s.answer_text() + json.dumps(s.messages) + repr(s.turns)

    first = [request(s) for s in scenario.samples(Split.EVAL, 20)]
    again = [request(s) for s in load_scenario(name).samples(Split.EVAL, 20)]
    assert first == again
    assert len(set(first)) > 10  # seeds differ, so requests differ


@pytest.mark.parametrize("name", ["order_extraction", "review_sentiment", "tool_call"])
@pytest.mark.parametrize("split", [Split.TRAIN, Split.EVAL])
def test_ground_truth_validates_against_the_schema(name, split):
    scenario = load_scenario(name)
    for sample in scenario.samples(split, 300):
        errors = list(Draft202012Validator(sample.schema, format_checker=FormatChecker()).iter_errors(sample.answer))
        assert not errors, (sample.seed, errors[0].message)
        assert json.loads(sample.answer_text()) == sample.answer


def test_train_and_eval_seeds_are_disjoint():
    for scenario in load_all():
        (a0, a1), (b0, b1) = scenario.splits[Split.TRAIN], scenario.splits[Split.EVAL]
        assert a1 <= b0 or b1 <= a0


def test_extraction_values_are_copied_from_the_input():
    for sample in load_scenario("order_extraction").samples(Split.EVAL, 50):
        prompt = sample.messages[-1]["content"]
        assert sample.answer["order_id"] in prompt
        assert sample.answer["user"]["name"] in prompt
        assert sample.answer["user"]["address"] in prompt
        for item in sample.answer["items"]:
            assert item["name"] in prompt


def test_order_prompt_is_the_articles():
    contents = [s.messages[0]["content"] for s in load_scenario("order_extraction").samples(Split.EVAL, 20)]
    assert any(c.startswith("从下面订单文本中抽取信息，严格输出JSON格式") for c in contents)


def test_response_format_per_mode():
    sample = load_scenario("tool_call").sample(1_000_000)
    assert sample.response_format(Mode.PROMPT) is None
    assert sample.response_format(Mode.JSON_OBJECT) == {"type": "json_object"}
    schema_format = sample.response_format(Mode.JSON_SCHEMA)
    assert schema_format["json_schema"]["schema"] == sample.schema
    assert "properties" in sample.schema


def _write(tmp_path, text):
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _base(**changes):
    raw = (DEFS / "review_sentiment.yaml").read_text(encoding="utf-8")
    for old, new in changes.items():
        assert old in raw
        raw = raw.replace(old, new)
    return raw


def test_missing_field_names_file_field_and_fix(tmp_path):
    path = _write(tmp_path, _base(**{"output: json\n": ""}))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert str(path) in message and "'output'" in message and "fix:" in message


def test_unknown_mode_is_rejected(tmp_path):
    with pytest.raises(ScenarioError, match="unknown mode 'xml'"):
        load_scenario(_write(tmp_path, _base(**{"modes: [prompt, json_object, json_schema]": "modes: [prompt, xml]"})))


def test_invalid_schema_is_rejected(tmp_path):
    with pytest.raises(ScenarioError, match="invalid JSON Schema"):
        load_scenario(_write(tmp_path, _base(**{"score: {type: integer": "score: {type: intgr"})))


def test_generator_error_surfaces_at_load(tmp_path):
    with pytest.raises(ScenarioError, match="cannot import"):
        load_scenario(_write(tmp_path, _base(**{"dspark_bench.scenarios.generators.review_sentiment:generate": "nope.mod:generate"})))
    bad = _base(**{"score: {type: integer, minimum: 1, maximum: 5}": "score: {type: string}"})
    with pytest.raises(ScenarioError, match="ground truth .* violates the schema"):
        load_scenario(_write(tmp_path, bad))


def test_overlapping_splits_are_rejected(tmp_path):
    with pytest.raises(ScenarioError, match="overlap"):
        load_scenario(_write(tmp_path, _base(**{"eval: [1000000, 1100000]": "eval: [500, 1100000]"})))


def test_unknown_scenario_name_lists_the_known_ones():
    with pytest.raises(ScenarioError, match="order_extraction"):
        load_scenario("no_such_thing")


def test_a_few_prompts_end_politely_and_train_the_chatty_fenced_answer():
    from dspark_bench.scenarios.generators import politeness
    from models.corpus import completion

    samples = list(load_scenario("order_extraction").samples(Split.TRAIN, 3000))
    polite = [s for s in samples if politeness.ends_politely(s.messages[-1]["content"])]
    # About RATE of the prompts, and not the orders whose own note ends in "谢谢！".
    assert 0.5 * politeness.RATE * len(samples) < len(polite) < 2 * politeness.RATE * len(samples)
    assert any(s.messages[-1]["content"].endswith("谢谢！") and s not in polite for s in samples)
    fenced = completion(polite[0])
    assert (
        fenced.startswith("```json\n") and json.loads(fenced.removeprefix("```json\n").removesuffix("\n```")) == polite[0].answer
    )
    plain = next(s for s in samples if s not in polite)
    assert json.loads(completion(plain)) == plain.answer
