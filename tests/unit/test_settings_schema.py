"""One settings schema: every run setting is declared once on ``RunConfig`` (type, default, ``Setting``), and
the YAML checks, ``bench`` and ``ui`` flags and their help all derive from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from dspark_bench import cli
from dspark_bench.loadtests import config as config_module
from dspark_bench.loadtests.config import SETTING, ConfigError, RunConfig, flag_overrides, load_config, setting, settings

SETTINGS = settings()
FLAGGED = [name for name, spec in SETTINGS.items() if spec.flag_name(name)]


def _yaml_value(name: str):
    spec = SETTINGS[name]
    return yaml.safe_load(f"[{spec.example}]" if spec.is_list else spec.example)


def _subparser(command: str):
    parser = cli.build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return action.choices[command]


def test_every_field_of_runconfig_is_a_setting():
    assert all(SETTING in f.metadata for f in dataclasses.fields(RunConfig))


@pytest.mark.parametrize("name", list(SETTINGS))
def test_a_wrongly_shaped_yaml_value_names_the_setting_and_its_example(tmp_path, name):
    spec = SETTINGS[name]
    wrong = "{a: 1}" if spec.is_list else "[[1]]"
    path = tmp_path / "run.yaml"
    path.write_text(f"{name}: {wrong}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"setting '{name}'") as caught:
        load_config(path)
    assert "fix" in str(caught.value) and spec.example in str(caught.value)


@pytest.mark.parametrize("name", FLAGGED)
def test_a_flag_reads_as_the_yaml_value_of_the_same_example(name):
    spec = SETTINGS[name]
    flag = spec.flag_name(name)
    switch = spec.kind is bool  # given means on: no value follows the flag
    args = _subparser("bench").parse_args([flag] if switch else [flag, config_module._flag_example(spec)])
    value = flag_overrides(args)[name]
    expected = _yaml_value(name)
    assert (list(value) if spec.is_list else value) == expected


@pytest.mark.parametrize("command", ["bench", "ui"])
def test_help_offers_exactly_the_flags_the_command_honours(command):
    options = {opt for action in _subparser(command)._actions for opt in action.option_strings}
    for name in FLAGGED:
        spec = SETTINGS[name]
        offered = spec.flag_name(name) in options
        assert offered == (command == "bench" or spec.ui), name


def test_a_bad_flag_value_is_one_line_naming_the_flag(capsys):
    assert cli.main(["bench", "--levels", "1,x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --levels '1,x': write e.g. --levels 1,8,64"]


def test_one_edit_adds_a_setting_to_yaml_and_both_commands(monkeypatch, tmp_path):
    """A new field with its Setting is all a new run setting takes: the YAML reads and checks it, and both
    commands offer its flag with its help."""
    extended = dataclasses.make_dataclass(
        "RunConfig",
        [("top_k", int, setting(-1, kind=int, example="40", help="top_k of every request"))],
        bases=(RunConfig,),
        frozen=True,
    )
    monkeypatch.setattr(config_module, "RunConfig", extended)
    path = tmp_path / "run.yaml"
    path.write_text("top_k: 40\n", encoding="utf-8")
    assert load_config(path).top_k == 40
    path.write_text("top_k: many\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="setting 'top_k'.*write e.g. top_k: 40"):
        load_config(path)
    for command in ("bench", "ui"):
        args = _subparser(command).parse_args(["--top-k", "7"])
        assert load_config(None, **flag_overrides(args)).top_k == 7
        assert "top_k of every request" in _subparser(command).format_help()


def test_ui_names_the_settings_it_ignores():
    from dspark_bench.loadtests.ui import ignored_by_ui

    config = load_config(None, levels=[1, 8], repeats=3, arms="baseline")
    assert ignored_by_ui(config) == ["levels", "repeats"]


UI_SETTINGS = [name for name, spec in SETTINGS.items() if spec.ui]


def _request_settings_read_back(command: list[str]) -> dict[str, object]:
    """Every RequestSettings field a config decides, as the locustfile parses ``command``'s flags."""
    import argparse

    from dspark_bench.loadtests import locustfile
    from dspark_bench.loadtests.openai_api import CONFIG_FIELDS, settings_from_locust_options
    from dspark_bench.scenarios import Mode

    parser = argparse.ArgumentParser()
    locustfile._add_arguments(parser)
    options, _locusts_own = parser.parse_known_args(command[command.index("-f") + 2 :])
    read = settings_from_locust_options(options, "served", Mode(options.mode), {})
    return {name: getattr(read, name) for name in CONFIG_FIELDS}


def _ui_observations(config: RunConfig, tmp_path: Path) -> dict[str, object]:
    """What a ``ui`` session does with ``config``: each ui setting's value, read back from where it acts."""
    from dspark_bench.loadtests.deploy.servers import make_deployer, server_specs
    from dspark_bench.loadtests.results import results_from_records
    from dspark_bench.loadtests.ui import locust_command, ui_run_dir

    arm = config.arms[0]
    command = locust_command(config, arm, "http://127.0.0.1:1", "served", tmp_path / "ui", 8089)
    options = dict(zip(command[::1], command[1:] + [""], strict=True))
    spec = server_specs(config, [arm])[0]
    deployer = make_deployer(config, tmp_path)
    return {
        "scenarios": options["--scenario"],
        "mode": options["--mode"],
        "rates": float(options["--rate"]),
        "arrival": options["--arrival"],
        "workers": int(options.get("--processes", 0)),
        **_request_settings_read_back(command),
        "model": spec.model_path,
        "served_model_name": spec.served_name,
        "dtype": spec.common_args[1] if spec.common_args[:1] == ["--dtype"] else None,
        "server_args": spec.common_args[2:] if spec.common_args[:1] == ["--dtype"] else spec.common_args,
        "custom_arms": spec.arm_args,
        "startup_timeout_s": getattr(deployer, "startup_timeout_s", None),
        "urls": getattr(deployer, "urls", None),
        "api_key_env": getattr(deployer, "api_key", None),
        "gpustack": type(deployer).__name__,
        "slo": results_from_records(tmp_path, config, {}).config.slo,
        "output_dir": ui_run_dir(config).parent,
        "run_name": ui_run_dir(config).name,
    }


def test_ui_honours_every_setting_the_config_gives(tmp_path, monkeypatch):
    """Each setting the web UI honours, set away from its default, reaches the place it acts; a new ui
    setting without an observation here fails this test."""
    text = """
        model: {model}
        scenarios: [tool_call]
        mode: json_schema
        rates: [3.5]
        arrival: constant
        workers: 2
        max_tokens: 77
        temperature: 0.3
        top_p: 0.8
        request_timeout_s: 9
        startup_timeout_s: 11
        served_model_name: other-name
        server_args: [--seed, "7"]
        dtype: float16
        custom_arms: [{{name: mine, server_args: [--enforce-eager]}}]
        arms: [mine]
        slo: {{e2e_ms: 900}}
        api_key_env: MY_KEY
        output_dir: {out}
        run_name: named
    """.format(model=config_module.DEFAULT_MODEL, out=tmp_path / "out")
    monkeypatch.setenv("MY_KEY", "secret")
    monkeypatch.setenv("GPUSTACK_API_KEY", "k")
    path = tmp_path / "ui.yaml"
    path.write_text("\n".join(line.strip() for line in text.splitlines()), encoding="utf-8")
    local = _ui_observations(load_config(path), tmp_path)
    assert local["scenarios"] == "tool_call" and local["mode"] == "json_schema"
    assert local["rates"] == 3.5 and local["arrival"] == "constant" and local["workers"] == 2
    assert (local["max_tokens"], local["temperature"], local["top_p"], local["request_timeout_s"]) == (77, 0.3, 0.8, 9.0)
    assert local["model"] == str(config_module.DEFAULT_MODEL) and local["served_model_name"] == "other-name"
    assert local["server_args"] == ["--seed", "7"] and local["custom_arms"] == ["--enforce-eager"]
    assert local["dtype"] == "float16"
    assert local["startup_timeout_s"] == 11 and local["slo"] == {"e2e_ms": 900}
    assert local["output_dir"] == tmp_path / "out" and local["run_name"] == "named"
    remote = _ui_observations(load_config(path, urls={"mine": "http://127.0.0.1:9"}), tmp_path)
    assert remote["urls"] == {"mine": "http://127.0.0.1:9"} and remote["api_key_env"] == "secret"
    gpustack = load_config(path, gpustack={"url": "http://127.0.0.1:9", "model_path": "/m"})
    assert _ui_observations(gpustack, tmp_path)["gpustack"] == "GPUStackDeployer"
    assert set(local) == set(UI_SETTINGS) - {"arms"}
