"""Every config value of the wrong shape or type: one line naming the setting and the fix, exit 2."""

import pytest

from dspark_bench.cli import main

MALFORMED = [
    ("levels: abc", "levels"),
    ("levels: [1, two]", "levels"),
    ("levels: [0]", "levels"),
    ("levels: [1.5]", "levels"),
    ("levels: {a: 1}", "levels"),
    ("levels: true", "levels"),
    ("requests_per_level: ten", "requests_per_level"),
    ("requests_per_level: 0", "requests_per_level"),
    ("requests_per_level: 2.5", "requests_per_level"),
    ("warmup_requests: -1", "warmup_requests"),
    ("repeats: [2]", "repeats"),
    ("max_tokens: many", "max_tokens"),
    ("max_tokens: true", "max_tokens"),
    ("temperature: hot", "temperature"),
    ("temperature: -0.5", "temperature"),
    ("request_timeout_s: soon", "request_timeout_s"),
    ("request_timeout_s: 0", "request_timeout_s"),
    ("level_timeout_s: -5", "level_timeout_s"),
    ("arms: 5", "arms"),
    ("arms: [dspark, 7]", "arms"),
    ("arms: [nope]", "arms"),
    ("scenarios: [order_extraction, 3]", "scenarios"),
    ("scenarios: []", "scenarios"),
    ("mode: [json_object]", "mode"),
    ("mode: xml", "mode"),
    ("server_args: 7", "server_args"),
    ("urls: http://x:1", "urls"),
    ("urls: {baseline: 8000}", "urls.baseline"),
    ("custom_arms: x", "custom_arms"),
    ("custom_arms: [{server_args: []}]", "custom_arms"),
    ("gpustack: yes", "gpustack"),
    ("model: 42", "model"),
    ("output_dir: [runs]", "output_dir"),
    ("nonsense_key: 1", "nonsense_key"),
    ("slo: 5", "slo"),
    ("slo: {ttfb_ms: 5}", "slo.ttfb_ms"),
    ("slo: {e2e_ms: -1}", "slo.e2e_ms"),
    ("- a list at the top", "top level"),
    ("levels: [1, 2", "YAML"),
]


@pytest.mark.parametrize(("text", "named"), MALFORMED, ids=[t for t, _ in MALFORMED])
def test_malformed_config_gives_one_line_and_exit_2(tmp_path, capsys, monkeypatch, text, named):
    monkeypatch.chdir(tmp_path)  # the default run folder, runs/, would be made here if anything started
    path = tmp_path / "run.yaml"
    path.write_text(text + "\n", encoding="utf-8")
    assert main(["bench", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and named in err and "fix" in err, err
    assert not (tmp_path / "runs").exists()  # nothing started


def test_a_single_level_may_be_written_as_a_number(tmp_path):
    from dspark_bench.loadtests.config import load_config

    path = tmp_path / "run.yaml"
    path.write_text("levels: 8\n", encoding="utf-8")
    assert load_config(path).levels == (8,)
