import pytest

from dspark_bench.cli import main
from dspark_bench.loadtests.config import ConfigError, load_config
from dspark_bench.scenarios import Mode


def test_defaults_follow_the_article():
    config = load_config()
    assert config.levels == (1, 2, 4, 8, 16, 32, 64)
    assert config.requests_per_level == 200 and config.max_tokens == 512 and config.temperature == 0.0
    assert config.arm_mode(config.arm("baseline")) is Mode.PROMPT
    assert config.arm_mode(config.arm("baseline-constrained")) is Mode.JSON_OBJECT


def test_yaml_then_flags(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("levels: [1, 8]\nrequests_per_level: 5\nmode: json_schema\n", encoding="utf-8")  # 5 < 8: the flag fixes it
    config = load_config(path, requests_per_level=9, arms="baseline,baseline-constrained")
    assert config.levels == (1, 8) and config.requests_per_level == 9 and config.mode is Mode.JSON_SCHEMA
    assert config.arms == ("baseline", "baseline-constrained")


def test_custom_arm(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "arms: [baseline, ngram]\ncustom_arms:\n  - {name: ngram, server_args: ['--speculative-config', '{}'], mode: json_schema}\n",
        encoding="utf-8",
    )
    config = load_config(path)
    assert config.arm("ngram").server_args == ("--speculative-config", "{}")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"arms": "baseline,nope"}, "unknown arm 'nope'"),
        ({"scenarios": "nope"}, "no such scenario"),
        ({"mode": "xml"}, "unknown mode"),
        ({"levels": [0]}, "levels"),
        ({"requests_per_level": 0}, "requests_per_level"),
        ({"model": "/nonexistent"}, "not a model directory"),
        ({"urls": {"baseline": "http://127.0.0.1:1"}, "arms": "baseline,baseline-constrained"}, "no URL for arms"),
        ({"bogus": 1}, "unknown setting"),
    ],
)
def test_bad_settings_fail_with_the_fix(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(**overrides)


def test_cli_bad_input_exits_2_with_one_line(capsys):
    assert main(["bench", "--arms", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: setting 'arms'")


def test_flags_that_choose_other_levels_drop_the_files_entries_for_levels_not_run(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("levels: [1, 8, 64]\nrepeats: 3\nlevel_repeats: {1: 5, 8: 5}\nlevel_requests: {64: 128}\n")
    assert load_config(path, levels="16,32").level_repeats == {}
    kept = load_config(path, levels="1,16")
    assert kept.level_repeats == {1: 5} and kept.level_requests == {} and kept.repeats_at(1) == 5
    assert load_config(path, levels="16,32", level_repeats={16: 4}).level_repeats == {16: 4}  # flags name them: kept
    assert load_config(path).level_repeats == {1: 5, 8: 5}
    path.write_text("levels: [16]\nlevel_repeats: {1: 5}\n")  # written beside the levels they name: still refused
    with pytest.raises(ConfigError, match="level_repeats.1"):
        load_config(path)

