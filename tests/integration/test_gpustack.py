"""The GPUStack deployer against a real GPUStack 2.x server (PostgreSQL-backed, no GPU worker).

Create, poll, logs and delete run for real. No worker can join here, so every instance stays
``pending``: the deployer must time out with the scheduler's reason and delete what it created. The
inference leg is the same OpenAI client the local vLLM tests drive.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx
import pytest
import yaml

from dspark_bench.loadtests.config import DEFAULT_MODEL, REPO_ROOT
from dspark_bench.loadtests.deploy.base import DeployError, ServerSpec
from dspark_bench.loadtests.deploy.gpustack import GPUStackClient, GPUStackDeployer
from dspark_bench.loadtests.deploy.gpustack_spec import parse_settings

from .gpustack_server import GPUStackServer, GPUStackUnavailable, running_gpustack

pytestmark = pytest.mark.integration

COMMON = ["--dtype", "bfloat16", "--max-model-len", "1024"]
DSPARK = ["--dspark-enabled", "--response-format", "json", "--enable-prefix-caching", "--dspark-speculative-length", "12"]


@pytest.fixture(scope="module")
def gpustack() -> GPUStackServer:
    try:
        with running_gpustack() as server:
            yield server
    except GPUStackUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture()
def client(gpustack) -> GPUStackClient:
    client = GPUStackClient(gpustack.url, gpustack.api_key)
    yield client
    for model in client.items("/v2/models"):  # no test leaves a model behind for the next
        client.delete_model(model["id"])
    client.close()


def _specs() -> list[ServerSpec]:
    return [ServerSpec("baseline", str(DEFAULT_MODEL), "tiny-json", [], COMMON),
            ServerSpec("dspark", str(DEFAULT_MODEL), "tiny-json", [], COMMON, DSPARK)]  # fmt: skip


def test_deployer_creates_polls_reads_logs_times_out_with_the_reason_and_deletes(gpustack, client, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUSTACK_API_KEY", gpustack.api_key)
    settings = parse_settings({"url": gpustack.url, "model_path": str(DEFAULT_MODEL), "ready_timeout_s": 4, "poll_interval_s": 1})
    lines: list[str] = []
    deployer = GPUStackDeployer(settings, tmp_path / "logs", say=lines.append)

    with pytest.raises(DeployError) as info:
        deployer.start_many(_specs())
    message = str(info.value)
    assert message.startswith("arm 'baseline': not running after 4s") and "pending (No available workers)" in message

    models = {m["name"]: m for m in client.items("/v2/models")}
    assert set(models) == {"dspark-bench-baseline", "dspark-bench-dspark"}
    dspark = models["dspark-bench-dspark"]
    assert dspark["backend"] == "vLLM" and dspark["backend_parameters"] == [*COMMON, *DSPARK]
    assert dspark["source"] == "local_path" and dspark["local_path"] == str(DEFAULT_MODEL)
    assert dspark["cluster_id"] == gpustack.cluster_id
    routes = {r["name"] for r in client.items("/v2/model-routes")}  # enable_model_route made one per model
    assert {"dspark-bench-baseline", "dspark-bench-dspark"} <= routes, routes
    instance = client.instances(dspark["id"])[0]
    assert instance["state"] == "pending"
    assert "not assigned to a worker" in client.instance_log(instance["id"])  # the logs endpoint, for real

    deployer.stop_all()
    assert client.items("/v2/models") == []
    assert any("deleted" in line for line in lines)


def test_gpu_selector_naming_no_worker_is_refused_by_gpustack(gpustack, client, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUSTACK_API_KEY", gpustack.api_key)
    settings = parse_settings({"url": gpustack.url, "model_path": "/m", "gpu_selector": {"gpu_ids": ["worker-1:cuda:0"]}})
    with pytest.raises(DeployError, match=r"^arm 'baseline': GPUStack POST /v2/models failed \(400\): Worker worker-1 not found"):
        GPUStackDeployer(settings, tmp_path).start_many(_specs())
    assert client.items("/v2/models") == []


def test_existing_model_is_left_alone(gpustack, client, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUSTACK_API_KEY", gpustack.api_key)
    settings = parse_settings({"url": gpustack.url, "model_path": "/m", "ready_timeout_s": 1, "poll_interval_s": 1})
    theirs = client.create_model({"name": "dspark-bench-dspark", "source": "local_path", "local_path": "/theirs",
                                  "backend": "vLLM", "cluster_id": gpustack.cluster_id})  # fmt: skip
    deployer = GPUStackDeployer(settings, tmp_path, say=lambda _line: None)
    with pytest.raises(DeployError, match="already exists"):
        deployer.start_many(_specs())
    deployer.stop_all()  # deletes the baseline model it made, not theirs
    assert [m["id"] for m in client.items("/v2/models")] == [theirs["id"]]


def test_wrong_key_and_missing_key_are_clear(gpustack, monkeypatch, tmp_path):
    settings = parse_settings({"url": gpustack.url, "model_path": "/m"})
    monkeypatch.delenv("GPUSTACK_API_KEY", raising=False)
    with pytest.raises(DeployError, match=r"needs an API key in \$GPUSTACK_API_KEY"):
        GPUStackDeployer(settings, tmp_path)
    monkeypatch.setenv("GPUSTACK_API_KEY", "gpustack_wrong")
    with pytest.raises(DeployError, match="refused the API key"):
        GPUStackDeployer(settings, tmp_path).start_many(_specs())


def test_bench_command_with_the_articles_yaml_fails_fast_keeps_results_and_cleans_up(gpustack, client, tmp_path):
    article = {"model_name": "deepseek-v4-1-dspark", "model_path": str(DEFAULT_MODEL), "engine": "vllm",
               "torch_dtype": "bfloat16", "replicas": 1,
               "engine_extra_args": ["--dspark-enabled", "--response-format", "json", "--enable-prefix-caching"]}  # fmt: skip
    (tmp_path / "article.yaml").write_text(yaml.safe_dump(article))
    config = {"arms": ["baseline", "dspark"], "levels": [1], "requests_per_level": 2, "output_dir": str(tmp_path / "runs"),
              "run_name": "gs", "gpustack": {"url": gpustack.url, "article_model": str(tmp_path / "article.yaml"),
                                             "ready_timeout_s": 3, "poll_interval_s": 1}}  # fmt: skip
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    env = {"GPUSTACK_API_KEY": gpustack.api_key, "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "dspark_bench", "bench", "--config", str(tmp_path / "run.yaml")],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # the run failed (2 is for bad input)
    error_lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and "No available workers" in error_lines[0], done.stderr
    assert "created, backend_parameters ['--dtype=bfloat16', '--dspark-enabled'" in done.stdout
    run_dir = tmp_path / "runs" / "gs"
    results = json.loads((run_dir / "results.json").read_text())
    assert results["complete"] is False and "No available workers" in results["error"]
    assert client.items("/v2/models") == []  # deleted on the way out
    for path in [*run_dir.rglob("*")]:
        if path.is_file():
            assert gpustack.api_key not in path.read_text(errors="replace"), path
    assert gpustack.api_key not in done.stdout + done.stderr


def test_requests_go_to_the_servers_openai_route(gpustack):
    # No instance runs here, so GPUStack answers the OpenAI route itself: proof the load would reach it.
    response = httpx.post(f"{gpustack.url}/v1/chat/completions", headers={"Authorization": f"Bearer {gpustack.api_key}"},
                          json={"model": "dspark-bench-dspark", "messages": [{"role": "user", "content": "{}"}]})  # fmt: skip
    assert response.status_code in {404, 503} and "error" in response.json()


def test_ctrl_c_while_waiting_deletes_the_models(gpustack, client, tmp_path):
    config = {"arms": ["baseline", "dspark"], "levels": [1], "requests_per_level": 2, "output_dir": str(tmp_path / "runs"),
              "run_name": "gs", "gpustack": {"url": gpustack.url, "model_path": "/m", "ready_timeout_s": 600,
                                             "poll_interval_s": 1}}  # fmt: skip
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    env = {"GPUSTACK_API_KEY": gpustack.api_key, "PATH": "/usr/bin:/bin"}
    process = subprocess.Popen([sys.executable, "-m", "dspark_bench", "bench", "--config", str(tmp_path / "run.yaml")],
                               cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    output = []
    for line in process.stdout:  # wait until it polls
        output.append(line)
        if "waiting for GPUStack" in line:
            break
    assert len(client.items("/v2/models")) == 2
    process.send_signal(signal.SIGINT)
    rest, _ = process.communicate(timeout=60)
    assert process.returncode == 130, "".join(output) + rest
    assert client.items("/v2/models") == []
    assert json.loads((tmp_path / "runs" / "gs" / "results.json").read_text())["error"] == "interrupted (Ctrl-C)"
