"""What one level asks of its users: the requests of one arm at one concurrency, handed out as tickets.

A ``LevelPlan`` holds the samples, the request settings and the sink; users take tickets from it
(warm-up tickets first, then exactly ``count`` measured ones) and hand back each completed record.
A ``PlanSlot`` is where a user class finds its plan: set once by whoever drives the users (the sweep,
or the locustfile's init hook under Locust's own CLI), waited on by users that start before it is set.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from gevent.event import Event

from dspark_bench.loadtests.openai_api import RequestSettings
from dspark_bench.loadtests.records import RecordSink, RequestRecord
from dspark_bench.scenarios import Sample, Scenario, Split


def level_samples(scenario: Scenario, block: tuple[int, int]) -> list[Sample]:
    """A level's prompts: the block's seeds of the eval split, wrapped round where the split (a dataset's
    lines) is shorter than the run; the sweep says so before it starts (``reused_prompts``)."""
    offset, size = block
    start, stop = scenario.splits[Split.EVAL]
    room = stop - start
    if size > room:
        return [scenario.sample(start + (offset + i) % room) for i in range(size)]
    return list(scenario.samples(Split.EVAL, size, offset=offset % (room - size + 1)))


@dataclass(frozen=True)
class Arrivals:
    """Open-loop load: requests sent at ``rate`` per second whether or not earlier ones have finished, by a
    seeded Poisson process (exponential gaps), evenly spaced (``poisson=False``), or at a trace's times."""

    rate: float
    poisson: bool = True
    seed: int = 0
    schedule: tuple[float, ...] = ()  # a trace's own offsets (seconds from its first request), replayed as they are

    def offsets(self, count: int) -> list[float]:
        """Seconds from the level's start at which each of ``count`` requests is due."""
        if self.schedule:
            return list(self.schedule[:count])
        if not self.poisson:
            return [index / self.rate for index in range(count)]
        gaps = random.Random(self.seed).expovariate
        offsets, at = [], 0.0
        for _ in range(count):
            offsets.append(at)
            at += gaps(self.rate)
        return offsets


WIRE = "wire"  # LevelPlan field metadata: the field travels to Locust workers in the plan message as it is
WIRED = {WIRE: True}


# Requests in a row that got no HTTP answer at all, after which each user waits ``SILENT_BACKOFF_S`` before its
# next ticket and the sweep asks the server's address whether anything still answers there: a server that
# stopped (a --url one has no process to watch) ends its level in seconds, not after every ticket failed at once.
SILENT_AFTER = 8
SILENT_BACKOFF_S = 0.5


def trailing_transport_failures(records: list[RequestRecord]) -> int:
    """How many of the latest records got no HTTP response (no status, an error). Pure."""
    count = 0
    for record in reversed(records):
        if record.status is not None or not record.error:
            break
        count += 1
    return count


@dataclass
class LevelPlan:
    """The requests of one level for one arm: warm-up tickets first, then exactly ``count`` measured. A
    ticket is one request, or one agent session (its turns, one record each). A closed loop then hands its
    users tail tickets (``is_tail``: not measured, recorded as warm-up) while any of its measured tickets
    is still in flight, so that its last measured answers run under the load the level names instead of
    alone: where answer lengths vary (25 tokens to 512), the drain of a fixed number of requests otherwise
    held 4-5 of 8 users over a level. Tails take the samples past the first ``total`` (a sweep's level
    has as many spare as it measures, ``RunConfig.level_prompts``), in turn, then those again.

    Its fields are of three kinds. What the level asks (``WIRED``: sent to Locust workers as they are,
    ``workers.plan_message``), with ``request`` and ``arrivals`` sent whole and ``samples`` rebuilt by each
    worker from ``sample_source``; where this process's share comes from (``slots``, ``cycle``, ``sink``);
    and the level's live state (``aborted``, ``records`` and the private counters)."""

    arm: str = field(metadata=WIRED)
    level: float = field(metadata=WIRED)  # users of a closed loop (0: the user count Locust reports, web UI runs), or the rate of an open one
    request: RequestSettings
    samples: list[Sample]  # cycled if shorter than warmup + count; past it, the tails' (``_sample_of``)
    sink: RecordSink
    count: int | None = field(metadata=WIRED)  # None: run until stopped (Locust UI)
    warmup: int = field(default=0, metadata=WIRED)
    repeat: int = field(default=0, metadata=WIRED)
    arrivals: Arrivals | None = None  # open loop: when each ticket is due; None: a closed loop
    users: int | None = field(default=None, metadata=WIRED)  # open loop: users that send the due requests (the cap on requests in flight)
    # Locust workers share a level: each takes the tickets whose number modulo ``cycle`` is in its ``slots``,
    # so together they send the same requests, at the same due times, as one process would.
    slots: tuple[int, ...] = (0,)
    cycle: int = 1
    sample_source: tuple[str, int] | None = None  # (scenario, offset) the samples came from, for workers to rebuild
    # Request ids name the worker and ticket too: Locust CLI and web UI runs, which may cycle through the
    # samples in several worker processes (a sweep's level sends each of its samples once per arm).
    ticket_ids: bool = field(default=False, metadata=WIRED)
    start_at: float | None = field(default=None, metadata=WIRED)  # open loop: when ticket 0 is due (workers share it); None: at the first ticket
    aborted: str | None = None
    records: list[RequestRecord] = field(default_factory=list)  # this level's completed requests, in order
    _issued: int = 0
    _own_issued: int = 0  # warm-up and measured tickets this process issued (tails aside)
    _done: int = 0  # warm-up and measured tickets completed (tails aside)
    _due: list[float] = field(default_factory=list)  # open loop: absolute send times, from the first ticket
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def next_ticket(self) -> tuple[Sample, bool, int] | None:
        """(sample, is warm-up, ticket number), or None once the level has issued all its requests."""
        with self._lock:
            total = self.total
            if not self.slots:
                return None
            turn, slot = divmod(self._issued, len(self.slots))
            index = turn * self.cycle + self.slots[slot]
            tail = self.is_tail(index)
            if self.aborted or (tail and not self._holds_load()):
                return None
            self._issued += 1
            self._own_issued += not tail
            if self.arrivals is not None and not self._due:
                start = self.start_at if self.start_at is not None else time.time()
                self._due = [start + offset for offset in self.arrivals.offsets(total or 1_000_000)]
        return self.samples[self._sample_of(index)], index < self.warmup or tail, index

    def _sample_of(self, index: int) -> int:
        """Which sample ticket ``index`` sends: its own, cycling; a tail, the spare samples past ``total``."""
        total = self.total
        if total is None or index < total or len(self.samples) <= total:
            return index % len(self.samples)
        return total + (index - total) % (len(self.samples) - total)

    def is_tail(self, index: int) -> bool:
        """Ticket ``index`` comes after the level's measured tickets: sent only to keep the load on."""
        total = self.total
        return total is not None and index >= total

    def _holds_load(self) -> bool:
        """A closed loop keeps its users busy while a measured ticket this process issued is in flight (each
        Locust worker for its own share of the level)."""
        return self.arrivals is None and self._done < self._own_issued

    def due(self, index: int) -> float | None:
        """When ticket ``index`` is to be sent (time.time() clock); None in a closed loop: at once."""
        return self._due[index] if self.arrivals is not None and index < len(self._due) else None

    @property
    def user_count(self) -> int:
        """Users to spawn: the closed loop's concurrency, or the open loop's cap on requests in flight."""
        return int(self.users if self.arrivals is not None and self.users else self.level)

    def complete(self, record: RequestRecord) -> None:
        self.sink.write(record)
        with self._lock:
            self._done += record.ends_ticket
            if self.count is not None:  # web UI runs go on for hours: their records live on disk only
                self.records.append(record)

    @property
    def completed(self) -> int:
        """Tickets done: requests, or agent sessions (one record per turn)."""
        return self._done

    @property
    def total(self) -> int | None:
        return None if self.count is None else self.warmup + self.count


    def silent_streak(self) -> int:
        """How many of this level's latest requests got no HTTP answer (``trailing_transport_failures``)."""
        with self._lock:
            return trailing_transport_failures(self.records)

    def finished(self) -> bool:
        return self.count is not None and self.completed >= self.warmup + self.count


class PlanSlot:
    """Holds the plan a user class works from; users that start before it is set wait for it."""

    def __init__(self, plan: LevelPlan | None = None) -> None:
        self._plan = plan
        self.failure: str | None = None  # why no plan will come (users stop without a traceback)
        self._ready = Event()
        if plan is not None:
            self._ready.set()

    def set(self, plan: LevelPlan) -> None:
        self._plan, self.failure = plan, None
        self._ready.set()

    def clear(self) -> None:
        """No plan until the next ``set``: users started meanwhile wait instead of taking a finished one."""
        self._plan, self.failure = None, None
        self._ready.clear()

    def fail(self, reason: str) -> None:
        self._plan, self.failure = None, reason
        self._ready.set()

    def wait(self, timeout_s: float) -> LevelPlan | None:
        """The plan; None when it failed or did not come in time."""
        self._ready.wait(timeout_s)
        return self._plan
