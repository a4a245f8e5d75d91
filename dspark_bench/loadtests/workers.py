"""Locust workers for the sweep (``bench --workers N``): the sweep's process is their master.

One machine's client can fall behind before the server does (a level then fails its achieved
concurrency or rate check). With workers, N local ``locust -f locustfile.py --worker`` processes send
the requests and the sweep drives them through Locust's own ``MasterRunner``. For each level the master
starts the users, learns how many each worker got, and sends every worker its part of the level's plan
(one message: what to ask and which ticket numbers are its own, in proportion to its users). The
workers forward each record to the master, which writes it and counts the level done, exactly as in
one process. The message format has one owner: ``plan_message`` / ``plan_from_message``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment

from dspark_bench.loadtests.deploy.local import die_with_parent, free_port
from dspark_bench.loadtests.openai_api import RequestSettings
from dspark_bench.loadtests.plan import WIRE, Arrivals, LevelPlan, PlanSlot, level_samples
from dspark_bench.loadtests.records import RECORD_MESSAGE, RecordSink, RequestRecord
from dspark_bench.loadtests.user import ChatCompletionsUser
from dspark_bench.scenarios import load_scenario

PLAN_MESSAGE = "dspark_plan"  # master -> worker: this level's plan (data None: no plan until the next one)
USER_CLASS = "JsonUser"  # the locustfile's user class: the master spawns users by this name
LOCUSTFILE = Path(__file__).with_name("locustfile.py")
START_LEAD_S = 0.5  # an open loop's first request is due this long after the plans are sent


def ticket_slots(users: list[int]) -> list[tuple[int, ...]]:
    """For workers with these user counts, the ticket positions (modulo the total) each one takes: every
    worker's share is proportional to its users and spread evenly through the sequence. Pure."""
    order = sorted(((turn + 0.5) / count, worker) for worker, count in enumerate(users) for turn in range(count))
    return [tuple(i for i, (_, owner) in enumerate(order) if owner == worker) for worker in range(len(users))]


def plan_message(plan: LevelPlan, slots: tuple[int, ...], cycle: int) -> dict[str, Any]:
    """What a worker needs to rebuild ``plan`` and take its own tickets (``plan.sample_source`` must be set):
    the plan's ``WIRE`` fields as they are, its request settings and arrivals whole, where its samples come
    from, and this worker's slots."""
    assert plan.sample_source is not None, "a plan sent to workers names where its samples come from"
    scenario, offset = plan.sample_source
    return {
        **{f.name: getattr(plan, f.name) for f in fields(LevelPlan) if f.metadata.get(WIRE)},
        "request": plan.request.as_message(),
        "arrivals": None if plan.arrivals is None else asdict(plan.arrivals),
        "sample_source": [scenario, offset],
        "sample_count": len(plan.samples),
        "slots": list(slots),
        "cycle": cycle,
    }


def plan_from_message(data: dict[str, Any], sink: RecordSink) -> LevelPlan:
    """The worker's part of a level, its records going to ``sink`` (the master, through Locust)."""
    scenario, offset = data["sample_source"]
    arrivals = data["arrivals"]
    return LevelPlan(
        **{f.name: data[f.name] for f in fields(LevelPlan) if f.metadata.get(WIRE)},
        request=RequestSettings.from_message(data["request"]),
        samples=level_samples(load_scenario(scenario), (offset, data["sample_count"])),
        sink=sink,
        arrivals=None if arrivals is None else Arrivals(**arrivals),
        slots=tuple(data["slots"]),
        cycle=data["cycle"],
        sample_source=(scenario, offset),
    )


def send_plans(runner, plan: LevelPlan) -> None:
    """Give each connected worker its part of ``plan``, in proportion to the users it reported."""
    clients = sorted(runner.clients.all, key=lambda client: client.id)
    counts = [sum(client.user_classes_count.values()) for client in clients]
    if plan.arrivals is not None:
        plan.start_at = time.time() + START_LEAD_S  # one arrival schedule for all workers
    for client, slots in zip(clients, ticket_slots(counts), strict=True):
        runner.send_message(PLAN_MESSAGE, plan_message(plan, slots, sum(counts)), client_id=client.id)


class WorkerError(RuntimeError):
    """The workers could not start, or one died; the message says which and the end of its log."""


class WorkerPool:
    """N local Locust workers and the master that drives them, kept for the whole sweep."""

    def __init__(self, count: int, log_dir: Path, startup_timeout_s: float = 90.0) -> None:
        self.count = count
        self.plan: LevelPlan | None = None
        self.env = Environment(user_classes=[ChatCompletionsUser.bound_to(PlanSlot(), USER_CLASS)])
        port = free_port()
        self.runner = self.env.create_master_runner("127.0.0.1", port)
        self.runner.register_message(RECORD_MESSAGE, self._receive)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.logs = [log_dir / f"locust-worker-{i}.log" for i in range(count)]
        command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--worker", "--master-host", "127.0.0.1"]
        command += ["--master-port", str(port)]
        self.processes: list[subprocess.Popen] = []
        for log in self.logs:
            with open(log, "ab") as out:  # each worker leads its own process group: its CPU is the harness's
                self.processes.append(
                    subprocess.Popen(
                        command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent
                    )
                )
        deadline = time.monotonic() + startup_timeout_s
        while self.runner.worker_count < count:
            self._check_alive()
            if time.monotonic() > deadline:
                self.close()
                raise WorkerError(
                    f"{self.runner.worker_count} of {count} Locust workers connected within {startup_timeout_s:.0f}s; see {log_dir}"
                )
            gevent.sleep(0.2)

    @property
    def pgids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def _receive(self, msg, **_kwargs) -> None:  # Locust passes the message as msg=
        if self.plan is not None:
            self.plan.complete(RequestRecord.from_dict(msg.data))

    def _check_alive(self) -> None:
        for process, log in zip(self.processes, self.logs, strict=True):
            if process.poll() is not None:
                tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:]) if log.exists() else ""
                raise WorkerError(f"a Locust worker exited (status {process.returncode}): {tail[-300:]}")

    def problem(self) -> str | None:
        try:
            self._check_alive()
        except WorkerError as exc:
            return str(exc)
        return None

    def start(self, host: str, plan: LevelPlan, timeout_s: float = 60.0) -> None:
        """Spawn the level's users on the workers, then give each worker its part of ``plan``."""
        self.plan = plan
        self.env.host = host
        users = plan.user_count
        self.runner.start(users, spawn_rate=users * 1000)
        deadline = time.monotonic() + timeout_s
        while not self.runner.spawning_completed or self.runner.user_count != users:  # every worker reported
            self._check_alive()
            if time.monotonic() > deadline:
                raise WorkerError(f"the workers reported {self.runner.user_count} of {users} users within {timeout_s:.0f}s")
            gevent.sleep(0.05)
        send_plans(self.runner, plan)

    @property
    def user_count(self) -> int:
        return self.runner.user_count

    def stop(self) -> None:
        """End the level: users stopped, plans withdrawn, every worker ready for the next one."""
        self.runner.stop()
        self.runner.send_message(PLAN_MESSAGE, None)
        deadline = time.monotonic() + 30.0
        alive = sum(1 for process in self.processes if process.poll() is None)
        while self.runner.worker_count < alive and time.monotonic() < deadline:
            gevent.sleep(0.05)
        self.plan = None

    def close(self) -> None:
        try:
            self.runner.quit()
        finally:
            for process in self.processes:
                if process.poll() is None:
                    process.terminate()
            for process in self.processes:
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
