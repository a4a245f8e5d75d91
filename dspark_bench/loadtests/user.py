"""The Locust user: takes a ticket from its level's plan, sends one streaming chat completion (or an agent
session's turns, one after another), validates each answer, records it, and reports it to Locust.

Closed loop: no wait between requests (not even a trip through Locust's scheduler), so concurrency is
the number of users. Invalid answers are
reported to Locust as failures named by their verdict, so its UI shows them beside HTTP errors.
A concrete user class binds a ``PlanSlot`` (``ChatCompletionsUser.bound_to``).
"""

from __future__ import annotations

import time

import gevent
from locust import User, constant, task
from locust.exception import StopUser
from locust.user.task import LOCUST_STATE_STOPPING

from dspark_bench.loadtests.openai_api import ChatOutcome, chat_client, send_chat
from dspark_bench.loadtests.plan import SILENT_AFTER, SILENT_BACKOFF_S, LevelPlan, PlanSlot
from dspark_bench.loadtests.records import RequestRecord
from dspark_bench.loadtests.validate import Verdict, validate
from dspark_bench.scenarios import Mode, Sample

PLAN_WAIT_S = 30.0  # how long a user that started before its plan waits for it


def worker_tag(environment) -> str:
    """A short id of this Locust process (``local`` outside distributed mode)."""
    return str(getattr(environment.runner, "client_id", "local")).rsplit("_", 1)[-1][:12]


class ChatCompletionsUser(User):
    abstract = True
    wait_time = constant(0)
    plan_slot: PlanSlot  # set by bound_to

    @classmethod
    def bound_to(cls, slot: PlanSlot, name: str = "ChatCompletions") -> type[ChatCompletionsUser]:
        """A concrete user class that works from ``slot``'s plan."""
        return type(name, (cls,), {"plan_slot": slot, "abstract": False})

    def on_start(self) -> None:
        plan = self.plan_slot.wait(PLAN_WAIT_S)
        self.plan = plan
        if plan is None:
            return  # the task stops this user (StopUser here would be logged as a crash)
        self.http = chat_client(self.host or "", plan.request)
        self._stamp_connections()

    def _stamp_connections(self) -> None:
        """Note when each request's connection was ready, and whether it was new: the pool's socket getter,
        wrapped (geventhttpclient has no hook for it; without the pool attribute nothing is stamped)."""
        pool = getattr(self.http, "_connection_pool", None)
        self._connected: tuple[float, bool] | None = None
        if pool is None or not hasattr(pool, "get_socket"):
            return
        get_socket = pool.get_socket

        def stamped_get_socket():
            reused = bool(getattr(pool, "_socket_queue", None) and pool._socket_queue.qsize())
            sock = get_socket()
            self._connected = (time.time(), not reused)
            return sock

        pool.get_socket = stamped_get_socket
    def on_stop(self) -> None:
        if hasattr(self, "http"):
            self.http.close()

    @task
    def closed_loop(self) -> None:
        """Send the next request the moment the last answer is recorded, until the plan runs out of
        tickets. The loop stays inside the task: between tasks Locust yields to gevent's hub
        (``gevent.sleep(0)``), and with 256 users on two cores that one yield took 34 ms median (81 ms
        p90), enough to hold only 0.83 of the users' requests in flight against a server that is
        never the bottleneck. Locust still stops the user by killing its greenlet; under a graceful stop
        (Locust's ``--stop-timeout``) the user finishes the request in flight and sends no other, as a
        TaskSet would end its task."""
        while (plan := self.plan) is not None and self._state != LOCUST_STATE_STOPPING and (ticket := plan.next_ticket()) is not None:
            if (due := plan.due(ticket[2])) is not None:  # open loop: wait for the request's arrival time
                gevent.sleep(max(0.0, due - time.time()))
            sample, warmup, index = ticket
            if sample.turns:
                self.session(plan, sample, warmup, index)
            else:
                self.chat(plan, sample, warmup, index)
            if plan.silent_streak() >= SILENT_AFTER:  # nothing answers: wait for the sweep's probe, not spend tickets
                gevent.sleep(SILENT_BACKOFF_S)
        raise StopUser()

    def session(self, plan: LevelPlan, sample: Sample, warmup: bool, index: int) -> None:
        """An agent session (``scenarios.session``): its turns one after another, each sent with the
        conversation so far, the server's own answers included; it ends at its last turn, at the first
        answer that is not valid, or when Locust stops the user gracefully."""
        history = list(sample.messages)
        for number in range(len(sample.turns)):
            request = sample.turn_request(number, history)
            record = self.chat(plan, request, warmup, index, turn=(number, len(sample.turns)))
            if record.verdict != Verdict.VALID.value or self._state == LOCUST_STATE_STOPPING:
                return
            history = [*request.messages, {"role": "assistant", "content": record.output}]

    def chat(self, plan: LevelPlan, sample: Sample, warmup: bool, index: int, turn: tuple[int, int] | None = None) -> RequestRecord:
        """One request of ``plan``: send, stream, validate, record, report to Locust. ``turn``: (number,
        turns) of an agent session's turn."""
        level = plan.level or (self.environment.runner.user_count if self.environment.runner else 1)
        tail = plan.is_tail(index)
        cancelled = False
        scheduled = plan.due(index)
        request = plan.request
        self._connected = None
        t_send = time.time()
        try:
            outcome = send_chat(self.http, request, sample)
        except gevent.GreenletExit:
            if not tail:
                raise
            # the level ended (its measured answers are in) and Locust stopped this user: the tail request
            # is recorded up to here, so that the level's load counts it while it was in flight
            cancelled = True
            outcome = ChatOutcome(t_send=t_send, error="cancelled: the level's measured requests had all ended")
        result = outcome.stream
        text = result.text if result else ""
        finish = result.finish_reason if result else None
        validation = validate(
            text,
            is_json=sample.is_json,
            schema=sample.schema if request.mode is not Mode.TEXT else None,
            truth=sample.answer,
            status=outcome.status,
            finish_reason=finish,
            error=outcome.error,
            timed_out=outcome.timed_out,
        )
        ticket_id = (
            f"{sample.scenario}.{request.mode.value}.{'r' if plan.arrivals else 'c'}{level:g}.r{plan.repeat}.{sample.seed}{'.tail' if tail else '.warmup' if warmup else ''}"
            + (f".{worker_tag(self.environment)}.{index}" if plan.ticket_ids else "")
        )
        record = RequestRecord(
            arm=plan.arm,
            level=level,
            scenario=sample.scenario,
            mode=request.mode.value,
            request_id=ticket_id if turn is None else f"{ticket_id}.t{turn[0]}",
            seed=sample.seed,
            repeat=plan.repeat,
            warmup=warmup,
            t_send=outcome.t_send,
            t_first_token=result.t_first_token if result else None,
            t_last_byte=result.t_last_byte if result else (time.time() if outcome.error else None),
            prompt_tokens=result.prompt_tokens if result else None,
            output_tokens=result.output_tokens if result else None,
            finish_reason=finish,
            status=outcome.status,
            error=outcome.error,
            output=text,
            verdict=validation.verdict.value,
            detail=validation.detail,
            field_accuracy=validation.field_accuracy,
            exact_match=validation.exact_match,
            t_connected=self._connected[0] if self._connected else None,
            new_connection=self._connected[1] if self._connected else None,
            t_headers=outcome.t_headers,
            tags=list(sample.tags) or None,
            t_scheduled=scheduled,
            itl_ms=[round((b - a) * 1000, 2) for a, b in zip(result.chunk_times, result.chunk_times[1:], strict=False)] if result else None,
            cached_tokens=result.cached_tokens if result else None,
            session=None if turn is None else ticket_id,
            turn=None if turn is None else turn[0],
            turns=None if turn is None else turn[1],
            tail=tail,
        )
        plan.complete(record)
        if cancelled:
            raise gevent.GreenletExit
        self.environment.events.request.fire(
            request_type="CHAT",
            name=f"{plan.arm} {sample.scenario}/{request.mode.value}" + ("" if turn is None else f" turn {turn[0] + 1}"),
            response_time=(record.e2e_s or 0.0) * 1000.0,
            response_length=record.output_tokens or 0,
            exception=None
            if validation.verdict is Verdict.VALID
            else RuntimeError(f"{validation.verdict.value}: {validation.detail[:120]}"),
            context={"verdict": validation.verdict.value, "warmup": warmup},
        )
        return record
