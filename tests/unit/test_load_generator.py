"""The load generator holds its concurrency: against a fast fake streaming server (never the bottleneck),
N closed-loop users keep about N requests in flight, at 64 and 256 users."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import locust  # noqa: F401 - gevent patches sockets first
import pytest

from dspark_bench.loadtests.deploy.base import Endpoint
from dspark_bench.loadtests.deploy.local import free_port
from dspark_bench.loadtests.metrics import level_metrics
from dspark_bench.loadtests.plan import LevelPlan
from dspark_bench.loadtests.records import RunFolderSink
from dspark_bench.loadtests.sweep import run_level
from dspark_bench.scenarios import Mode, Split, load_scenario

SERVER = Path(__file__).resolve().parents[1] / "fake_stream_server.py"


@pytest.fixture(scope="module")
def fast_server():
    port = free_port()
    process = subprocess.Popen([sys.executable, str(SERVER), "--port", str(port)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    yield f"http://127.0.0.1:{port}"
    process.kill()
    process.wait()


@pytest.mark.parametrize(
    "users",
    [
        64,
        pytest.param(
            256,
            # measured 0.82-0.84 x 256 on the 2-core machine (quiet and loaded alike): the load generator
            # itself falls short here; issue "numbers that hold" stays open on it
            marks=pytest.mark.xfail(strict=True, reason="256 users hold ~0.83 N on two cores, not 0.95 N yet"),
        ),
    ],
)
def test_users_hold_their_concurrency(fast_server, tmp_path, users):
    samples = list(load_scenario("order_extraction").samples(Split.EVAL, 50))
    plan = LevelPlan("fake", users, Mode.JSON_OBJECT, "fake", samples, RunFolderSink(tmp_path), 4 * users, warmup=users)
    run_level(Endpoint("fake", fast_server, "fake"), plan, timeout_s=120, progress_every_s=60)
    metrics = level_metrics(plan.records)
    assert metrics.requests == 4 * users and metrics.rate_http_error == 0
    assert metrics.achieved_concurrency >= 0.95 * users, metrics.achieved_concurrency
