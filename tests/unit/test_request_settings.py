"""Request settings are one object: what the config decides reaches every way of sending requests (the
sweep's plans, Locust workers, and ``ui``'s Locust command line) whole, so no path drifts from another."""

from __future__ import annotations

import argparse
from pathlib import Path

import locust  # noqa: F401 - gevent patches sockets first

from dspark_bench.loadtests import locustfile
from dspark_bench.loadtests.config import load_config
from dspark_bench.loadtests.openai_api import LOCUST_FLAGS, RequestSettings, settings_from_locust_options
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
    assert read_back.temperature == 0.3 and read_back.timeout_s == 9.0 and read_back.max_tokens == 77


def test_every_request_setting_a_config_decides_has_a_locust_flag():
    """model, mode and headers come from --served-model, --mode and --api-key-env; every other field of
    RequestSettings must cross the command line, or ``ui`` would send the default instead."""
    own_flags = {"model", "mode", "headers"}
    assert set(RequestSettings.__dataclass_fields__) - own_flags == set(LOCUST_FLAGS)


def test_request_settings_survive_a_worker_message():
    settings = RequestSettings("m", Mode.JSON_SCHEMA, 33, 0.7, 5.0, {"Authorization": "Bearer k"})
    assert RequestSettings.from_message(settings.as_message()) == settings
