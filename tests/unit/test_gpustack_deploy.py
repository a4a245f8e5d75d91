"""The deployer's handling of instance states and engine logs, against a scripted GPUStack.

What a real server without GPU workers cannot show (an instance that runs, fails, or runs without
the arm's flags) is scripted here; tests/integration/test_gpustack.py drives a real GPUStack.
"""

from __future__ import annotations

import json

import httpx
import pytest

from dspark_bench.loadtests.deploy.base import DeployError, ServerSpec
from dspark_bench.loadtests.deploy.gpustack import GPUStackDeployer
from dspark_bench.loadtests.deploy.gpustack_spec import parse_settings

DSPARK = ["--dspark-enabled", "--response-format", "json", "--enable-prefix-caching"]
GOOD_LOG = "dspark-serve argv: --model /m --dspark-enabled --response-format json --enable-prefix-caching\nready\n"


class ScriptedGPUStack:
    """Answers the deployer's calls; instances go through ``states`` one poll at a time."""

    def __init__(self, states: list[str], log: str = GOOD_LOG, message: str = "") -> None:
        self.states, self.log, self.message = states, log, message
        self.models: dict[int, dict] = {}
        self.deleted: list[int] = []
        self.polls = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path, request.method
        assert request.headers["authorization"] == "Bearer gpustack_secret"
        if path == "/v2/clusters":
            return httpx.Response(200, json={"items": [{"id": 7, "is_default": True}]})
        if path == "/v2/models" and method == "GET":
            return httpx.Response(200, json={"items": list(self.models.values())})
        if path == "/v2/models" and method == "POST":
            body = json.loads(request.content)
            model = {**body, "id": len(self.models) + 1}
            self.models[model["id"]] = model
            return httpx.Response(201, json=model)
        if path == "/v2/model-instances":
            state = self.states[min(self.polls, len(self.states) - 1)]
            self.polls += 1
            model_id = int(request.url.params["model_id"])
            return httpx.Response(200, json={"items": [{"id": 100 + model_id, "name": f"m{model_id}-x", "state": state,
                                                        "state_message": self.message}]})  # fmt: skip
        if path.startswith("/v2/model-instances/") and path.endswith("/logs"):
            return httpx.Response(200, text=json.dumps(self.log))
        if path.startswith("/v2/models/") and method == "DELETE":
            self.deleted.append(int(path.rsplit("/", 1)[1]))
            self.models.pop(int(path.rsplit("/", 1)[1]), None)
            return httpx.Response(200)
        return httpx.Response(404, json={"message": f"no route {method} {path}"})


def _deploy(fake: ScriptedGPUStack, tmp_path, monkeypatch, timeout_s: float = 5):
    monkeypatch.setenv("GPUSTACK_API_KEY", "gpustack_secret")
    settings = parse_settings({"url": "http://gs", "model_path": "/m", "ready_timeout_s": timeout_s, "poll_interval_s": 0})
    deployer = GPUStackDeployer(settings, tmp_path, say=lambda _line: None, transport=httpx.MockTransport(fake))
    return deployer, [ServerSpec("dspark", "/m", "m", [], [], DSPARK)]


def test_running_instance_with_the_flags_becomes_an_endpoint(tmp_path, monkeypatch):
    fake = ScriptedGPUStack(["pending", "starting", "running"])
    deployer, specs = _deploy(fake, tmp_path, monkeypatch)
    (endpoint,) = deployer.start_many(specs)
    assert endpoint.base_url == "http://gs" and endpoint.model == "dspark-bench-dspark"
    assert endpoint.headers() == {"Authorization": "Bearer gpustack_secret"} and "gpustack_secret" not in repr(endpoint)
    assert fake.models[1]["cluster_id"] == 7 and (tmp_path / "dspark.log").read_text() == GOOD_LOG
    deployer.stop_all()
    assert fake.deleted == [1]


def test_error_state_fails_at_once_with_the_log_tail(tmp_path, monkeypatch):
    fake = ScriptedGPUStack(["pending", "error"], log="loading\nCUDA out of memory\n", message="container exited")
    deployer, specs = _deploy(fake, tmp_path, monkeypatch, timeout_s=600)
    with pytest.raises(DeployError, match=r"is error: container exited; instance log tail:\nloading\nCUDA out of memory"):
        deployer.start_many(specs)
    assert fake.polls == 2
    deployer.stop_all()
    assert fake.deleted == [1]


def test_stock_vllm_refusing_the_articles_flags_is_named(tmp_path, monkeypatch):
    refused = "vllm serve: error: unrecognized arguments: --dspark-enabled --response-format json\n"
    deployer, specs = _deploy(ScriptedGPUStack(["running"], log=refused), tmp_path, monkeypatch)
    with pytest.raises(DeployError, match="error: unrecognized arguments: --dspark-enabled.*must carry the engine patch"):
        deployer.start_many(specs)


def test_running_without_the_flags_in_argv_is_stopped(tmp_path, monkeypatch):
    log = "non-default args: {'model': '/m', 'enable_prefix_caching': True}\n"
    deployer, specs = _deploy(ScriptedGPUStack(["running"], log=log), tmp_path, monkeypatch)
    with pytest.raises(DeployError, match=r"missing \['--dspark-enabled', '--response-format'\]"):
        deployer.start_many(specs)
    deployer.stop_all()


def test_missing_key_stops_the_run_with_results_on_disk(tmp_path, monkeypatch):
    from dspark_bench.loadtests.config import load_config
    from dspark_bench.loadtests.sweep import run_sweep

    monkeypatch.delenv("GPUSTACK_API_KEY", raising=False)
    config = load_config(None, gpustack={"url": "http://gs", "model_path": "/m"}, arms=["baseline"], levels=[1])
    with pytest.raises(DeployError, match=r"needs an API key in \$GPUSTACK_API_KEY"):
        run_sweep(config, tmp_path / "run")
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["complete"] is False and "GPUSTACK_API_KEY" in results["error"]
