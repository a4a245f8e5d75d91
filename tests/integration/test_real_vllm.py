"""Real vLLM CPU servers with the shipped model: the scenarios answer, and a small paired sweep runs."""

import json
import subprocess
import sys

import httpx
import pytest

from loadtests.config import DEFAULT_MODEL, load_config, python_launcher
from loadtests.deploy import LocalDeployer, ServerSpec, cpu_server_env
from scenarios import Split, load_all
from tests.integration.procs import assert_no_server_left

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    deployer = LocalDeployer(tmp_path_factory.mktemp("logs"), startup_timeout_s=600)
    spec = ServerSpec(
        "smoke", str(DEFAULT_MODEL), "tiny-json", python_launcher(), list(load_config().server_args), cpu_server_env()
    )
    try:
        yield deployer.start(spec)
    finally:
        deployer.stop_all()


@pytest.mark.parametrize("scenario", load_all(), ids=lambda s: s.name)
def test_shipped_model_answers_each_scenario(vllm_server, scenario):
    sample = next(scenario.samples(Split.EVAL, 1))
    response = httpx.post(
        f"{vllm_server.base_url}/v1/chat/completions",
        json={"model": vllm_server.model, "messages": sample.messages, "max_tokens": 512, "temperature": 0},
        timeout=120,
    )
    response.raise_for_status()
    choice = response.json()["choices"][0]
    text = choice["message"]["content"]
    assert choice["finish_reason"] == "stop"
    if scenario.is_json:
        json.loads(text)  # the JSON it was asked for in the prompt parses
    else:
        assert text.strip() and not text.lstrip().startswith("{")


def test_small_paired_sweep_of_two_arms(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadtests",
            "bench",
            "--arms",
            "baseline,baseline-constrained",
            "--levels",
            "1,2",
            "--requests",
            "3",
            "--warmup",
            "1",
            "--out",
            str(tmp_path),
            "--name",
            "sweep",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    run = tmp_path / "sweep"
    results = json.loads((run / "results.json").read_text())
    assert results["complete"] is True
    assert results["skipped_arms"] == {} or "dspark" not in results["config"]["arms"]
    assert [(lv["level"], lv["arm"]) for lv in results["levels"]] == [
        (1, "baseline"),
        (1, "baseline-constrained"),
        (2, "baseline-constrained"),
        (2, "baseline"),
    ]
    assert "--no-enable-prefix-caching" not in results["arms"]["baseline"]["argv"]
    lines = (run / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 2 * (3 + 1)
    records = [json.loads(line) for line in lines]
    assert {r["mode"] for r in records if r["arm"] == "baseline"} == {"prompt"}
    assert {r["mode"] for r in records if r["arm"] == "baseline-constrained"} == {"json_object"}
    assert all(r["output_tokens"] and r["t_first_token"] for r in records)
    for level in results["levels"]:
        assert level["metrics"]["requests"] == 3 and level["metrics"]["raw_tok_s"] > 0
        assert "vllm:generation_tokens" in level["server"]  # /metrics scraped around the level
    assert len(list((run / "responses" / "baseline").glob("*.json"))) == 8
    assert (run / "report.html").exists() and "eff tok/s" in out.stdout
    assert len((run / "levels.csv").read_text().splitlines()) == 1 + 4
    assert_no_server_left(run)


def test_locustfile_runs_under_locusts_own_cli(vllm_server, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            "loadtests/locustfile.py",
            "--headless",
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            "6s",
            "--host",
            vllm_server.base_url,
            "--scenario",
            "tool_call",
            "--mode",
            "json_schema",
            "--arm",
            "cli",
            "--run-dir",
            str(tmp_path),
            "--only-summary",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode in (0, 1), out.stderr[-2000:]  # 1: Locust saw failures (invalid answers), still a run
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len(records) >= 2 and {r["arm"] for r in records} == {"cli"}
    assert {r["mode"] for r in records} == {"json_schema"} and all(r["verdict"] != "http_error" for r in records)
    assert "CHAT" in out.stdout + out.stderr  # our requests in Locust's own statistics
