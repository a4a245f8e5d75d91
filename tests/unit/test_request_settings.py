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
                         top_p=0.5, request_timeout_s=9.0)  # fmt: skip
    command = locust_command(config, "baseline-constrained", "http://127.0.0.1:1", "served", Path("runs/x"), 8089)
    options = _locustfile_options(command)
    read_back = settings_from_locust_options(options, options.served_model, Mode(options.mode), {})
    assert read_back == config.request_settings("baseline-constrained", "served", {})
    assert read_back.temperature == 0.3 and read_back.top_p == 0.5 and read_back.request_timeout_s == 9.0 and read_back.max_tokens == 77


def test_every_request_setting_a_config_decides_is_a_run_setting_with_a_locust_flag():
    """model, mode and headers come from the deployed arm (--served-model, --mode, --api-key-env); every
    other field of RequestSettings is the run setting of the same name and crosses the command line, or
    ``ui`` would send the default instead."""
    assert set(RequestSettings.__dataclass_fields__) - {"model", "mode", "headers"} == set(CONFIG_FIELDS) == set(LOCUST_FLAGS)
    assert set(CONFIG_FIELDS) <= set(settings())
    assert LOCUST_FLAGS["request_timeout_s"] == "--request-timeout"


def test_request_settings_survive_a_worker_message():
    settings = RequestSettings("m", Mode.JSON_SCHEMA, max_tokens=33, temperature=0.7, top_p=0.9, request_timeout_s=5.0,
                               headers={"Authorization": "Bearer k"})
    assert RequestSettings.from_message(settings.as_message()) == settings


def test_a_new_request_setting_reaches_the_wire_from_every_sender(tmp_path):
    """top_p is a RequestSettings field marked WIRE and a RunConfig setting, two edits: the config's value is
    in the body of the sweep's smoke request and of every request the Locust users send, as recorded by the
    server; left unset, it is not sent at all (the server's default)."""
    import json

    from dspark_bench.loadtests.deploy.base import Endpoint
    from dspark_bench.loadtests.plan import LevelPlan
    from dspark_bench.loadtests.records import RunFolderSink
    from dspark_bench.loadtests.sweep import run_level, smoke_test
    from dspark_bench.scenarios import Split, load_scenario
    from tests.conftest import start_fake_stream_server

    def sent(top_p: float | None) -> list[dict]:
        recorded = tmp_path / f"bodies-{top_p}.jsonl"
        url, server = start_fake_stream_server("--tokens", "7", "--token-ms", "1", "--record", str(recorded))
        try:
            config = load_config(None, arms="baseline-constrained", scenarios="order_extraction", top_p=top_p, max_tokens=64)
            endpoint = Endpoint("baseline-constrained", url, "fake")
            smoke_test(endpoint, config, "baseline-constrained")
            samples = list(load_scenario("order_extraction").samples(Split.EVAL, 6))
            request = config.request_settings("baseline-constrained", "fake", {})
            plan = LevelPlan("baseline-constrained", 2, request, samples, RunFolderSink(tmp_path / str(top_p)), 4, warmup=0)
            run_level(endpoint, plan, timeout_s=60, progress_every_s=60)
        finally:
            server.kill()
            server.wait()
        return [json.loads(line) for line in recorded.read_text().splitlines()]

    bodies = sent(0.9)
    assert len(bodies) >= 5  # the smoke request and the level's four (tails may add more)
    assert all(body["top_p"] == 0.9 and body["max_tokens"] == 64 and body["temperature"] == 0.0 for body in bodies)
    assert len({tuple(sorted(body)) for body in bodies}) == 1  # the smoke request is built as the users' are
    assert not any("top_p" in body for body in sent(None))
