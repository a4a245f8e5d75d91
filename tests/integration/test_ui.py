"""`dspark-bench ui` and the locustfile under Locust's own CLI, against the fast fake server: how a web-UI
session ends (Ctrl-C and SIGTERM alike), the level workers record, a swarm without a host."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from dspark_bench.loadtests.deploy.local import free_port
from tests.integration.procs import processes_on_port

pytestmark = pytest.mark.slow  # real processes and fakes, seconds each: make test runs them, make test-quick does not

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = ROOT / "dspark_bench" / "loadtests" / "locustfile.py"




def _wait_for(predicate, timeout_s: float = 60.0):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if found := predicate():
                return found
        except (httpx.HTTPError, ValueError, KeyError, IndexError, StopIteration):
            pass
        time.sleep(0.5)
    raise AssertionError("timed out")


def _json_rows(web: str):
    stats = httpx.get(f"{web}/stats/requests", timeout=5).json()
    return next(t["data"] for t in stats["extended_stats"] if t["key"] == "json-stats")


def _ui_failed(process: subprocess.Popen, what: str) -> AssertionError:
    """``what`` went wrong: the UI stopped, and the end of its output, to raise."""
    process.kill()
    return AssertionError(f"{what}; its output: {process.communicate()[0][-3000:]}")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize(("sig", "workers"), [(signal.SIGTERM, 0), (signal.SIGINT, 0), (signal.SIGTERM, 2)])
def test_ui_ends_cleanly_on_a_signal_and_writes_the_run(fast_server, tmp_path, sig, workers):
    web_port = free_port()
    command = [sys.executable, "-m", "dspark_bench", "ui", "--arm", "baseline-constrained",
               "--url", f"baseline-constrained={fast_server}", "--web-port", str(web_port), "--workers", str(workers),
               "--out", str(tmp_path), "--name", "ui"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    web = f"http://127.0.0.1:{web_port}"
    try:
        try:  # a cold start on a loaded 2-core machine once took over 60 s
            if workers:
                _wait_for(lambda: httpx.get(f"{web}/stats/requests", timeout=5).json()["worker_count"] == workers, 120.0)
            else:
                _wait_for(lambda: httpx.get(web, timeout=5).status_code == 200, 120.0)
        except AssertionError:
            raise _ui_failed(process, "the UI did not answer within 120 s") from None
        httpx.post(f"{web}/swarm", data={"user_count": 4, "spawn_rate": 4, "host": fast_server}, timeout=10)
        # generous for a loaded 2-core machine (20 requests take a few seconds); a miss shows the UI's stats and output
        try:
            _wait_for(lambda: _json_rows(web)[0]["requests"] >= 20, 180.0)
        except AssertionError:
            stats = httpx.get(f"{web}/stats/requests", timeout=5).text[:2000]
            raise _ui_failed(process, f"20 requests did not arrive within 180 s; the UI's stats: {stats}") from None
        process.send_signal(sig)
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()  # Locust dies with it (PR_SET_PDEATHSIG)
    assert process.returncode == 0, output[-3000:]
    assert "Traceback" not in output and "BlockingSwitchOutError" not in output, output[-3000:]
    run = tmp_path / "ui"
    results = json.loads((run / "results.json").read_text())
    assert results["complete"] and results["levels"] and (run / "report.html").exists()
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    assert len(records) >= 20
    # the run's user count, not a worker's share of it
    assert {r["level"] for r in records if not r["warmup"]} <= {1, 2, 3, 4} and max(r["level"] for r in records) == 4
    assert _port_free(web_port) and not processes_on_port(web_port)


def test_locust_dies_with_a_killed_ui(fast_server, tmp_path):
    web_port = free_port()
    command = [sys.executable, "-m", "dspark_bench", "ui", "--arm", "baseline-constrained",
               "--url", f"baseline-constrained={fast_server}", "--web-port", str(web_port), "--out", str(tmp_path)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    _wait_for(lambda: httpx.get(f"http://127.0.0.1:{web_port}", timeout=5).status_code == 200)
    process.kill()  # no chance to clean up
    process.wait()
    _wait_for(lambda: not processes_on_port(web_port) and _port_free(web_port), timeout_s=30)


def test_a_swarm_without_a_host_stops_with_one_line(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "2", "-r", "2", "-t", "20s",
         "--served-model", "m", "--run-dir", str(tmp_path)],  # fmt: skip
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    output = out.stdout + out.stderr
    assert out.returncode == 2, output[-2000:]
    assert "no host to send requests to" in output and "TypeError" not in output and "Traceback" not in output, output[-2000:]
