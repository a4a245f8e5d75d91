"""Locust workers share a level without losing or repeating a request: the ticket split, the plan
message, and whole sweeps (closed and open loop) through two real Locust worker processes against a
fast fake streaming server."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import Counter

import locust  # noqa: F401 - gevent patches sockets first
import pytest

from dspark_bench.loadtests.config import load_config
from dspark_bench.loadtests.openai_api import RequestSettings
from dspark_bench.loadtests.plan import Arrivals, LevelPlan
from dspark_bench.loadtests.records import RunFolderSink, read_records
from dspark_bench.loadtests.sweep import RunAborted, run_sweep
from dspark_bench.loadtests.workers import plan_from_message, plan_message, ticket_slots
from dspark_bench.scenarios import Mode, Split, load_scenario


@pytest.mark.parametrize("users", [[1, 0], [2, 2], [3, 2], [5, 1, 2]])
def test_ticket_slots_split_the_sequence_in_proportion_to_users(users):
    slots = ticket_slots(users)
    assert sorted(s for worker in slots for s in worker) == list(range(sum(users)))  # every position, once
    assert [len(worker) for worker in slots] == users


def _tickets(plan: LevelPlan) -> list[tuple[int, float | None]]:
    """The plan's tickets up to its first tail (a closed loop hands out tails while its tickets are in flight:
    here none completes)."""
    out = []
    while (ticket := plan.next_ticket()) is not None and not plan.is_tail(ticket[2]):
        out.append((ticket[2], plan.due(ticket[2])))
    return out


@pytest.mark.parametrize("arrivals", [None, Arrivals(5.0, poisson=True, seed=3)])
def test_workers_parts_add_up_to_the_plan_one_process_would_run(tmp_path, arrivals):
    samples = list(load_scenario("order_extraction").samples(Split.EVAL, 12))
    sink = RunFolderSink(tmp_path)
    whole = LevelPlan("a", 4, RequestSettings("m", Mode.JSON_OBJECT, headers={"Authorization": "Bearer k"}), samples, sink, 10, warmup=2, arrivals=arrivals, users=4,
                      start_at=1000.0, sample_source=("order_extraction", 0))  # fmt: skip
    parts = [plan_from_message(plan_message(whole, slots, 5), sink) for slots in ticket_slots([3, 2])]
    assert [p.samples for p in parts] == [samples, samples]  # rebuilt from the scenario, not sent
    assert [p.request for p in parts] == [whole.request, whole.request]  # the request settings travel whole
    assert sorted(t for part in parts for t in _tickets(part)) == _tickets(whole)  # same tickets, same due times
    # past its 12 tickets, with all in flight, a closed loop hands out a tail (unmeasured), an open loop nothing
    tail = whole.next_ticket()
    assert (tail is None) == (arrivals is not None) and (tail is None or (tail[1] and whole.is_tail(tail[2])))


def _sweep(fast_server, tmp_path, name: str, **settings):
    config = load_config(
        None, arms="baseline-constrained", urls={"baseline-constrained": fast_server}, scenarios="order_extraction", warmup_requests=2, workers=2,
        output_dir=str(tmp_path), run_name=name, **settings,
    )  # fmt: skip
    return run_sweep(config, tmp_path / name), tmp_path / name


@pytest.mark.slow
def test_an_open_loop_sweep_through_two_workers_loses_no_record(fast_server, tmp_path):
    results, run_dir = _sweep(fast_server, tmp_path, "open", rates=[10.0, 20.0, 40.0], requests_per_level=40, arrival="constant")
    assert results.complete
    records = list(read_records(run_dir))
    assert Counter(r.level for r in records) == {10.0: 42, 20.0: 42, 40.0: 42}  # warm-up + measured, each level
    assert len({r.request_id for r in records}) == len(records)
    for level in results.levels:
        rate = level.level
        assert 0.85 * rate <= level.metrics.achieved_rate <= 1.15 * rate, (rate, level.metrics.achieved_rate)
        assert not level.health.load_problems, level.health.problems  # the machine's noise aside (CI shares it)


@pytest.mark.slow
def test_a_closed_loop_sweep_through_two_workers_holds_its_users(fast_server, tmp_path):
    results, run_dir = _sweep(fast_server, tmp_path, "closed", levels=[1, 5], requests_per_level=24)
    records = [r for r in read_records(run_dir) if not r.tail]
    assert Counter(r.level for r in records) == {1: 26, 5: 30}  # 5 users: 6 whole waves; one user on two workers: nothing lost
    for level in results.levels:
        assert level.metrics.achieved_concurrency >= 0.9 * level.level, (level.level, level.metrics.achieved_concurrency)


@pytest.mark.slow
def test_a_worker_that_dies_stops_the_run_with_one_line(fast_server, tmp_path):
    from dspark_bench.loadtests import workers

    started = []
    original = workers.WorkerPool.start

    def start_then_kill_one(self, host, plan, timeout_s=60.0):
        original(self, host, plan, timeout_s)
        if not started:
            started.append(True)
            threading.Timer(0.3, os.kill, (self.processes[0].pid, signal.SIGKILL)).start()

    workers.WorkerPool.start = start_then_kill_one
    try:
        with pytest.raises(RunAborted, match="a Locust worker exited"):
            _sweep(fast_server, tmp_path, "dies", rates=[2.0], requests_per_level=40)
    finally:
        workers.WorkerPool.start = original
    results = json.loads((tmp_path / "dies" / "results.json").read_text())
    assert not results["complete"] and "worker" in results["error"]


@pytest.mark.slow
def test_locusts_own_cli_runs_an_open_loop_through_two_workers(fast_server, tmp_path):
    """``locust -f locustfile.py --processes 2 --rate R`` (what ``dspark-bench ui --rate R --workers 2``
    runs): the master's plan reaches both workers, which send at R per second together."""
    import subprocess
    import sys

    from dspark_bench.loadtests.workers import LOCUSTFILE

    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--processes", "2", "-u", "8", "-r", "8"]
    command += ["-t", "8s", "--host", fast_server, "--rate", "10", "--arrival", "constant", "--run-dir", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 1: some answers failed validation (the fake's JSON)
    records = read_records(tmp_path)
    assert {r.level for r in records} == {10.0}
    assert len({r.request_id for r in records}) == len(records)
    assert 60 <= len(records) <= 85, len(records)  # 10/s for ~7.5 s of the 8 (the first is due 0.5 s in)


SENT_WHOLE = {"request", "arrivals", "samples", "sample_source", "slots", "cycle"}  # encoded by plan_message itself
LOCAL = {"sink", "aborted", "records", "_issued", "_own_issued", "_done", "_due", "_lock"}  # each process's own


def test_every_plan_field_either_travels_to_workers_or_is_each_processs_own(tmp_path):
    """A new LevelPlan field must say which: marked WIRED, it reaches the workers with no other edit."""
    from dataclasses import fields

    from dspark_bench.loadtests.plan import WIRE

    wired = {f.name for f in fields(LevelPlan) if f.metadata.get(WIRE)}
    assert wired | SENT_WHOLE | LOCAL == {f.name for f in fields(LevelPlan)} and not wired & (SENT_WHOLE | LOCAL)
    samples = list(load_scenario("order_extraction").samples(Split.EVAL, 3))
    plan = LevelPlan("a", 2.5, RequestSettings("m", Mode.JSON_SCHEMA), samples, RunFolderSink(tmp_path), 7, warmup=3, repeat=2,
                     users=9, start_at=5.0, sample_source=("order_extraction", 0))  # fmt: skip
    rebuilt = plan_from_message(json.loads(json.dumps(plan_message(plan, (1,), 2))), RunFolderSink(tmp_path))
    assert {name: getattr(rebuilt, name) for name in wired} == {name: getattr(plan, name) for name in wired}


def test_the_web_uis_master_sends_the_plan_once_every_worker_has_reported_its_users(tmp_path):
    """Locust fires spawning_complete a second after the spawn jobs even where workers have not reported their
    users yet (a loaded machine): a plan split then gives the uncounted workers no tickets, and their users
    stop at once (a clean-clone CI run on 2 cores: 0 requests in 180 s)."""
    import gevent
    from locust.env import Environment
    from locust.runners import WorkerNode

    from dspark_bench.loadtests import locustfile
    from dspark_bench.loadtests.deploy.local import free_port

    env = Environment(user_classes=[locustfile.JsonUser])
    runner = env.create_master_runner("127.0.0.1", free_port())
    sent: list[tuple[str, dict | None]] = []
    runner.send_message = lambda kind, data=None, client_id=None: sent.append((client_id, data))
    try:
        for worker in ("w1", "w2"):
            runner.clients[worker] = WorkerNode(worker)
            runner.clients[worker].user_classes_count = {locustfile.USER_CLASS: 0}
        runner.target_user_count = 4
        samples = list(load_scenario("order_extraction").samples(Split.EVAL, 12))
        plan = LevelPlan("a", 0, RequestSettings("m", Mode.JSON_OBJECT), samples, RunFolderSink(tmp_path), 8, sample_source=("order_extraction", 0))
        env.dspark = locustfile.SwarmState(plan.sink, pending=plan)  # type: ignore[attr-defined]
        waiting = gevent.spawn(locustfile._plan_to_workers, env, 0.01)
        gevent.sleep(0.2)
        assert not sent and not waiting.dead  # no reports yet: no plan
        runner.clients["w1"].user_classes_count = {locustfile.USER_CLASS: 3}
        gevent.sleep(0.2)
        assert not sent  # one worker's report is not all of them
        runner.clients["w2"].user_classes_count = {locustfile.USER_CLASS: 1}
        waiting.join(timeout=2)
        assert waiting.dead and env.dspark.pending is None
        assert [(worker, len(data["slots"])) for worker, data in sent] == [("w1", 3), ("w2", 1)]
        # a swarm stopped before the reports came sends nothing
        sent.clear()
        env.dspark.pending = plan
        runner.clients["w2"].user_classes_count = {locustfile.USER_CLASS: 0}
        waiting = gevent.spawn(locustfile._plan_to_workers, env, 0.01)
        gevent.sleep(0.1)
        env.dspark.pending = None
        waiting.join(timeout=2)
        assert waiting.dead and not sent
    finally:
        runner.quit()
