"""The harness's own fault handling, against a deliberately broken server (tests/fake_openai_server.py).
Real-server behaviour is covered by test_real_vllm.py."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dspark_bench.loadtests.config import load_config
from dspark_bench.loadtests.deploy.base import DeployError
from dspark_bench.loadtests.records import read_records
from dspark_bench.loadtests.sweep import RunAborted, run_sweep
from tests.integration.procs import assert_no_server_left

pytestmark = pytest.mark.slow  # real processes and fakes, seconds each: make test runs them, make test-quick does not

FAKE = f"{sys.executable} {Path(__file__).resolve().parents[1] / 'fake_openai_server.py'}"


def _config(tmp_path, behavior, after=4, **overrides):
    # after: requests answered before the fault; the first is the sweep's smoke request
    arm = {"name": "broken", "launcher": FAKE, "server_args": ["--behavior", behavior, "--after", str(after)], "mode": "json_object"}
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps({"custom_arms": [arm]}), encoding="utf-8")
    settings = {
        "arms": "broken",
        "model": str(tmp_path),
        "levels": [2],
        "requests_per_level": 6,
        "warmup_requests": 0,
        "startup_timeout_s": 30.0,
        "request_timeout_s": 2.0,
        "level_timeout_s": 60.0,
    }
    settings.update(overrides)
    return load_config(path, **settings)


def test_server_that_fails_to_start_shows_its_log(tmp_path):
    with pytest.raises(DeployError) as info:
        run_sweep(_config(tmp_path, "fail-start"), tmp_path / "run")
    assert "exited with code 3" in str(info.value)
    assert "cannot load model weights" in str(info.value)  # the log tail
    assert json.loads((tmp_path / "run" / "results.json").read_text())["complete"] is False


def test_server_dying_mid_level_keeps_partial_results(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(RunAborted, match="server died"):
        run_sweep(_config(tmp_path, "die-after"), run_dir)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["complete"] is False and "server died" in results["error"]
    assert results["levels"] and results["levels"][0]["health"]["incomplete"] is True
    records = read_records(run_dir / "requests.jsonl")
    # answered before it died (the fake's answer lacks "user": a schema violation), then errors
    assert [r.verdict for r in records].count("schema_violation") >= 2  # the 3rd may be cut by the exit
    assert {r.verdict for r in records} <= {"schema_violation", "http_error"}
    assert_no_server_left(run_dir)


def test_hanging_requests_time_out_are_recorded_and_stop_the_run(tmp_path):
    run_dir = tmp_path / "run"
    # 2 users run 4 waves (the least a level runs), so 8 requests
    with pytest.raises(RunAborted, match="8 of 8 requests failed at c=2; first: no complete answer within 2s"):
        run_sweep(_config(tmp_path, "hang-after", after=1, requests_per_level=2), run_dir)
    verdicts = [r.verdict for r in read_records(run_dir / "requests.jsonl") if not r.tail]
    assert verdicts == ["timeout"] * 8  # kept on disk
    assert json.loads((run_dir / "results.json").read_text())["complete"] is False
    assert_no_server_left(run_dir)


def test_a_refused_request_stops_the_run_with_the_servers_message(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(RunAborted, match=r"refused the first request \(HTTP 400: max_tokens is too large"):
        run_sweep(_config(tmp_path, "refuse"), run_dir)
    assert json.loads((run_dir / "results.json").read_text())["complete"] is False
    assert_no_server_left(run_dir)


def test_a_server_that_never_answers_the_first_request_stops_the_run_before_any_load(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(RunAborted, match="the first request failed"):
        run_sweep(_config(tmp_path, "hang"), run_dir)
    assert not (run_dir / "requests.jsonl").read_text()
    assert_no_server_left(run_dir)


def test_healthy_fake_server_run_and_cli_exit_codes(tmp_path):
    run_dir = tmp_path / "run"
    state = run_sweep(_config(tmp_path, "ok"), run_dir)
    assert state.complete
    records = [r for r in read_records(run_dir / "requests.jsonl") if not r.tail]
    # 6 asked for at 2 users: raised to 4 whole waves
    assert len(records) == 8 and all(r.verdict == "schema_violation" and "'user'" in r.detail for r in records)
    assert len(list((run_dir / "responses" / "broken").glob("*.json"))) >= 8  # and the tails
    # an unreachable URL: one line on stderr, non-zero exit, the run folder kept
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dspark_bench",
            "bench",
            "--arms",
            "baseline",
            "--url",
            "baseline=http://127.0.0.1:9",
            "--out",
            str(tmp_path),
            "--name",
            "unreachable",
            "--levels",
            "1",
            "--requests",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert "unreachable" in out.stderr.splitlines()[0]
    assert (tmp_path / "unreachable" / "results.json").exists()


@pytest.mark.parametrize(("sig", "code", "said"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_ctrl_c_or_sigterm_stops_servers_and_keeps_results(tmp_path, sig, code, said):
    config = tmp_path / "run.yaml"
    # the smoke request is answered, the level's requests hang
    arm = {"name": "broken", "launcher": FAKE, "server_args": ["--behavior", "hang-after", "--after", "1"], "mode": "json_object"}
    config.write_text(json.dumps({"custom_arms": [arm]}), encoding="utf-8")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dspark_bench",
            "bench",
            "--config",
            str(config),
            "--arms",
            "broken",
            "--model",
            str(tmp_path),
            "--levels",
            "2",
            "--requests",
            "4",
            "--warmup",
            "0",
            "--request-timeout",
            "600",
            "--out",
            str(tmp_path),
            "--name",
            "run",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    results = tmp_path / "run" / "results.json"
    while time.time() < deadline and not (results.exists() and json.loads(results.read_text())["arms"]):
        time.sleep(0.5)
    time.sleep(2)  # requests are in flight (the server hangs)
    process.send_signal(sig)
    try:
        _out, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    assert process.returncode == code, err[-1000:]
    assert said in err and "Traceback" not in err, err[-2000:]
    saved = json.loads(results.read_text())
    assert saved["complete"] is False and ("interrupted" in saved["error"] or "terminated" in saved["error"])
    assert_no_server_left(tmp_path / "run")


def test_a_url_server_that_dies_mid_level_ends_the_level_in_seconds(tmp_path):
    """A --url server has no process to watch: requests that get no answer at all, then a silent address,
    end the level, instead of the level's every ticket being spent on a dead server."""
    from dspark_bench.loadtests.deploy.local import free_port

    port = free_port()
    server = subprocess.Popen([*FAKE.split(), "--port", str(port), "--behavior", "die-after", "--after", "4"])
    try:
        time.sleep(1.5)
        config = _config(tmp_path, "ok", urls={"broken": f"http://127.0.0.1:{port}"}, requests_per_level=5000, level_timeout_s=120.0)
        started = time.monotonic()
        with pytest.raises(RunAborted, match="stopped answering"):
            run_sweep(config, tmp_path / "run")
        assert time.monotonic() - started < 30
        records = read_records(tmp_path / "run" / "requests.jsonl")
        assert len(records) < 200  # not the level's 5,000 tickets
        results = json.loads((tmp_path / "run" / "results.json").read_text())
        assert results["complete"] is False and "stopped answering" in results["error"]
    finally:
        server.kill()
        server.wait()
