"""Request settings are one object: what the config decides reaches every way of sending requests (the
sweep's plans, Locust workers, and ``ui``'s Locust command line) whole, so no path drifts from another."""

from __future__ import annotations

import argparse
from pathlib import Path

import locust  # noqa: F401 - gevent patches sockets first

from dspark_bench.loadtests import locustfile
from dspark_bench.loadtests.config import load_config, settings
from dspark_bench.loadtests.openai_api import CONFIG_FIELDS, LOCUST_FLAGS, RequestSettings, settings_from_locust_options
from dspark_bench.loadtests.ui import locust_command
from dspark_bench.scenarios import Mode


def _locustfile_options(command: list[str]) -> argparse.Namespace:
    """``command``'s options as the locustfile's own parser reads them (Locust's are skipped)."""
    parser = argparse.ArgumentParser()
    locustfile._add_arguments(parser)
    options, _locusts_own = parser.parse_known_args(command[command.index("-f") + 2 :])
    return options


def test_ui_hands_locust_every_request_setting_the_config_gives():
    config = load_config(None, arms="baseline-constrained", mode="json_schema", max_tokens=77, temperature=0.3,
                         request_timeout_s=9.0)  # fmt: skip
    command = locust_command(config, "baseline-constrained", "http://127.0.0.1:1", "served", Path("runs/x"), 8089)
    options = _locustfile_options(command)
    read_back = settings_from_locust_options(options, options.served_model, Mode(options.mode), {})
    assert read_back == config.request_settings("baseline-constrained", "served", {})
    assert read_back.temperature == 0.3 and read_back.request_timeout_s == 9.0 and read_back.max_tokens == 77


def test_every_request_setting_a_config_decides_is_a_run_setting_with_a_locust_flag():
    """model, mode and headers come from the deployed arm (--served-model, --mode, --api-key-env); every
    other field of RequestSettings is the run setting of the same name and crosses the command line, or
    ``ui`` would send the default instead."""
    assert set(RequestSettings.__dataclass_fields__) - {"model", "mode", "headers"} == set(CONFIG_FIELDS) == set(LOCUST_FLAGS)
    assert set(CONFIG_FIELDS) <= set(settings())
    assert LOCUST_FLAGS["request_timeout_s"] == "--request-timeout"


def test_request_settings_survive_a_worker_message():
    settings = RequestSettings("m", Mode.JSON_SCHEMA, 33, 0.7, 5.0, {"Authorization": "Bearer k"})
    assert RequestSettings.from_message(settings.as_message()) == settings
