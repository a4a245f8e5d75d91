"""A load generator starved of CPU on purpose: the level says what starved it, is not a measurement, and the
gate fails it."""

import os
import subprocess
import sys

import pytest

from dspark_bench.loadtests.config import load_config
from dspark_bench.loadtests.metrics import STARVED_WAIT_SHARE
from dspark_bench.loadtests.sweep import run_sweep
from dspark_bench.reports.gate import Thresholds, evaluate

HOG = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"


@pytest.mark.slow
def test_a_starved_load_generator_invalidates_its_level_and_fails_the_gate(fast_server, tmp_path):
    cpu = min(os.sched_getaffinity(0))
    # eight busy processes on the load generator's one CPU: when it is ready to run, it waits behind them. A
    # fair scheduler (Linux 6.18's EEVDF) favours a task that sleeps often: behind three it waited only 12-16%
    # of a level on the 2-core EPYC, behind eight 37%
    hogs = [subprocess.Popen([sys.executable, "-c", HOG, str(cpu)]) for _ in range(8)]
    try:
        config = load_config(
            None, arms="baseline-constrained", urls={"baseline-constrained": fast_server}, scenarios="order_extraction",
            levels="4", requests_per_level=16, warmup_requests=0, client_cpus=str(cpu), output_dir=str(tmp_path), run_name="starved",
        )  # fmt: skip
        results = run_sweep(config, tmp_path / "starved")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    health = results.levels[0].health
    assert health.client_wait_share is not None and health.client_wait_share > STARVED_WAIT_SHARE
    assert any(problem.startswith("the load generator was starved") for problem in health.problems)
    assert any(text.startswith("the load generator waited for a CPU") for text in health.starved)
    failed = [c for c in evaluate(results, Thresholds(against="baseline-constrained")) if not c.passed]
    assert [c.check for c in failed] == ["level measured cleanly"] and "load generator was starved" in failed[0].detail


def test_a_stall_beside_a_remote_server_does_not_claim_its_waits_were_measured():
    from dspark_bench.loadtests.metrics import LevelHealth
    from dspark_bench.loadtests.sweep import _unstarved_reason

    remote = _unstarved_reason(LevelHealth(client_wait_share=0.01, api_server_wait_share=None))
    local = _unstarved_reason(LevelHealth(client_wait_share=0.01, api_server_wait_share=0.02))
    assert "not measured" in remote and "no process" not in remote
    assert local.startswith("no process of the level was starved")


def test_a_load_generator_woken_often_but_briefly_is_not_starved():
    """Waits that add up to a large share of the level but are short each time (a client woken per streamed
    token on a busy 2-core machine) leave every request on time; long waits do not."""
    from dataclasses import fields

    from dspark_bench.loadtests.metrics import LevelMetrics, level_health

    unset = {f.name: None for f in fields(LevelMetrics)}
    metrics = LevelMetrics(**{**unset, "requests": 8, "completed": 8, "latency_p50_ms": 500.0, "achieved_concurrency": 1.0})
    brief = level_health(1, metrics, {}, {}, None, False, True, {"client_wait_share": 0.3, "client_wait_per_slice_ms": 1.5})
    assert brief.valid and not brief.starved  # 3 ms late on a 500 ms request: 0.6%
    long = level_health(1, metrics, {}, {}, None, False, True, {"client_wait_share": 0.3, "client_wait_per_slice_ms": 20.0})
    assert not long.valid and long.starved and "8.0% of a request's latency late" in long.problems[0]
    unknown = level_health(1, metrics, {}, {}, None, False, True, {"client_wait_share": 0.3})  # no slice count: the share decides
    assert not unknown.valid
