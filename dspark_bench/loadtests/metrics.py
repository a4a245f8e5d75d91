"""Every metric of a level, defined once, here. Pure functions over measured (non-warm-up) records.

Definitions (vLLM ``bench serve`` where they overlap):
- wall time of a level: last measured byte received - first measured request sent.
- throughput span (``throughput_span_s``), what every throughput below is over: the wall time x the
  measured requests' share of the request-seconds in flight over it; by Little's law, their summed
  latency / the achieved concurrency. It is the wall time where no unmeasured request ran beside them.
  Warm-ups share a level's start with the measured requests, and a closed loop's tail requests its end
  (its users stay busy until its last measured answer): a 512-token answer begun late keeps the level
  going at full load for its whole latency, and over wall time alone the tails' tokens would count as
  time but not as output.
- effective JSON throughput: output tokens of ``valid`` responses / throughput span (tokens/s). For text
  scenarios every complete answer is ``valid``, so it equals the raw throughput minus truncations.
- raw output throughput: output tokens of every response that returned tokens / throughput span.
- request throughput: completed requests (any verdict but http_error / timeout) / throughput span.
- E2E latency: last byte - send, over completed requests; P50 / P95 / P99 (numpy linear percentiles).
- TTFT: first content chunk - send; P50 / P95.
- TPOT: (E2E - TTFT) / (output tokens - 1), over completed requests with more than one token; mean
  and median.
- invalid rate per category: count of that verdict / measured requests.
- stalled-stream rate: completed answers of more than STALL_MIN_TOKENS tokens whose first content
  arrived after STALL_SHARE of their latency (the whole stream read in one piece) / such answers.
  Either the server held its answer (stock vLLM on two cores does at one user, response headers
  included: the same client streams another arm cleanly at the same level) or the client stalled, and
  then the level's TTFT and TPOT are suspect (the gate tells the two apart by the other arms).
- achieved concurrency: time-weighted mean number of requests in flight (send to last byte, warm-up
  and tail requests included) over the level's wall time. A closed loop of N users that keeps its
  concurrency holds ~N: its users send unmeasured tail requests while its last measured ones run
  (``plan.LevelPlan``), so its end does not drain. Every closed-loop level measures at least MIN_WAVES
  rounds of its users, in whole waves with its warm-up (``RunConfig.measured_requests``): a single
  burst holds its concurrency over its own span by construction and measures nothing steady.
- longest silence: the longest time during which some answer was streaming (first content to last byte)
  and no answer of the level, warm-up and tails included, received anything. Beyond PAUSE_FLOOR_S and
  PAUSE_P99_MULTIPLE times the level's P99 ITL the server or the host paused, and the level is not valid.
- connect P95: send -> connection ready (the client's share of TTFT; ~0 when connections are reused);
  new-connection rate: the measured requests that had to connect.
- ITL (inter-token latency, as ``vllm bench serve`` defines it): the gaps between successive chunks of
  content of each completed answer, pooled; a speculative chunk carrying several tokens is one gap.
  Mean, P50, P95, P99.
- goodput, with SLOs (``slo``: ``ttft_ms``, ``tpot_ms``, ``e2e_ms``, each optional): a request is good
  when it is ``valid`` and meets every SLO given; good requests / throughput span, and their output
  tokens / throughput span. Without SLOs every valid request is good (goodput = the valid request rate).
- prompt cache share: prompt tokens the server found in its prefix cache / prompt tokens, over the
  requests whose server said (vLLM with --enable-prompt-tokens-details); for agent sessions also by turn.
- agent sessions (one record per turn; ``RequestRecord.session``): sessions = measured sessions that
  ended; session success rate = those whose every turn was answered validly / sessions; turns per
  session = mean turns sent (a session ends at its first answer that is not valid). Every per-request
  metric above counts each turn as a request.
- achieved rate: measured requests sent per second, first send to last; send lag P95 (open loop): how
  late the client sent requests after their arrival time.
- a level is valid when its achieved concurrency (open loop: achieved rate) is at least
  MIN_CONCURRENCY_SHARE of its users (its target rate) and
  the client was not saturated (harness CPU below CLIENT_SATURATED of one core, measured by the sweep);
  otherwise ``level_problems`` says why and the level must not be read as a measurement at that load.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dspark_bench.loadtests.machine import GpuSample, gpu_problems, noise_problems
from dspark_bench.loadtests.records import RequestRecord
from dspark_bench.loadtests.validate import INVALID_JSON, Verdict

FAILED = {Verdict.HTTP_ERROR.value, Verdict.TIMEOUT.value}
STALL_MIN_TOKENS = 8
STALL_SHARE = 0.9
MIN_CONCURRENCY_SHARE = 0.9
MIN_WAVES = 4  # rounds of its users a closed-loop level runs at least
CLIENT_SATURATED = 0.9  # share of one core: the load generator is one gevent thread
# Seconds per second a process's threads waited for a CPU above which it was starved: the load generator's
# timings are then late (the level is invalid), an API server's TTFT and ITL include the wait (said, not
# invalid: the server's own processes may be what starved it)
STARVED_WAIT_SHARE = 0.2
# ... and the load generator only where its reads came late by more than this share of a request's latency.
# A closed-loop request waits on it twice (the read of the last chunk, the send of the next), each wake-up as
# long as its mean wait: a client woken per streamed token on a busy 2-core machine waits often (a fifth
# of the level and more) but ~1-2 ms a time, which moves no figure by 1%; one that cannot keep up waits
# tens of milliseconds a time.
LATE_READ_SHARE = 0.01
# No answer received anything for this long while answers were streaming: the server or the host paused (a
# first use of a code path paged back in, a stalled VM), and the level measured the pause, not the server.
# Longer than PAUSE_FLOOR_S and PAUSE_P99_MULTIPLE times the level's P99 gap between chunks, so a slow
# model's long prefill steps are no pause. The healthy levels of sessions 15-17's 2-core runs went silent for
# at most 475 ms (``studies/silences.py``); the two pauses seen were 54x and 62x their P99.
PAUSE_FLOOR_S = 1.0
PAUSE_P99_MULTIPLE = 10.0
# What ended it tells the engine from the way to the client: after the engine's own pause each answer gets
# about a chunk per step; chunks the engine made while the API server or the load generator waited for a CPU
# arrive together, dozens per answer (a 0.6 s hold at 8 users on 2 cores: every answer then ended at once).
FLUSH_WINDOW_S = 0.01
HELD_FLUSH = 3.0
# A level where this share of an arm's answers or more was cut at max_tokens measured a model that does not
# finish its answers: its speed is the speed of writing until the limit (a loop inside a string, say), which a
# drafter can guess, not the speed of serving the workload. Said beside every figure; the level stays a
# measurement of the server.
TRUNCATED_WARN_SHARE = 0.2


def _starved(wait_share: float | None) -> bool:
    return wait_share is not None and wait_share > STARVED_WAIT_SHARE


def read_lateness(wait_per_slice_ms: float | None, latency_p50_ms: float | None) -> float | None:
    """How late the load generator's waits made each request, as a share of its median latency. Pure."""
    if wait_per_slice_ms is None or not latency_p50_ms:
        return None
    return 2 * wait_per_slice_ms / latency_p50_ms


def client_starved(wait_share: float | None, lateness: float | None) -> bool:
    """The load generator waited for a CPU a large share of the level, and (where measured) its reads came
    late by more than LATE_READ_SHARE of a request's latency."""
    return _starved(wait_share) and (lateness is None or lateness > LATE_READ_SHARE)


@dataclass
class LevelMetrics:
    requests: int
    completed: int
    wall_s: float
    effective_tok_s: float
    raw_tok_s: float
    requests_per_s: float
    output_tokens: int
    valid_output_tokens: int
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    latency_p99_ms: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    tpot_mean_ms: float | None
    tpot_median_ms: float | None
    valid_rate: float
    invalid_json_rate: float  # parse_error + schema_violation
    rate_parse_error: float
    rate_schema_violation: float
    rate_truncated: float
    rate_http_error: float
    rate_timeout: float
    field_accuracy: float | None  # mean over valid responses with ground truth
    exact_match_rate: float | None
    stalled_stream_rate: float = 0.0
    achieved_concurrency: float | None = None
    itl_mean_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p95_ms: float | None = None
    itl_p99_ms: float | None = None
    good_requests: int = 0
    goodput_req_s: float = 0.0
    good_tok_s: float = 0.0
    achieved_rate: float | None = None  # requests sent per second (the target, in an open loop)
    scheduled_rate: float | None = None  # ... had every request gone out when due (an open loop's real target)
    send_lag_p95_ms: float | None = None  # open loop: how late the client sent requests after they were due
    connect_p95_ms: float | None = None  # send -> connection ready: the client's side of TTFT
    new_connection_rate: float | None = None  # requests that had to connect; a healthy closed loop reuses
    cached_prompt_share: float | None = None  # prompt tokens found in the prefix cache; None: the server did not say
    sessions: int | None = None  # agent sessions ended (None: not a session scenario)
    session_success_rate: float | None = None
    turns_per_session: float | None = None
    cached_prompt_share_by_turn: list[float | None] | None = None  # turn 1, 2, ... of the sessions
    span_s: float | None = None  # the throughput span every throughput is over (None: results that predate it)
    longest_silence_ms: float | None = None  # longest time no streaming answer received anything (``longest_silence_s``)
    silence_flush: float | None = None  # chunks per answer that ended it within 10 ms (``silence_flush``)

    def as_dict(self) -> dict:
        return asdict(self)


def percentile_ms(values_s: Sequence[float], q: float) -> float | None:
    """The q-th percentile (numpy's linear interpolation) of latencies given in seconds, in ms."""
    return float(np.percentile(np.asarray(values_s) * 1000.0, q)) if len(values_s) else None


def percentile_ms_rows(values_s: np.ndarray, q: float) -> np.ndarray:
    """``percentile_ms`` of each row of a 2-D array (bootstrap resamples), vectorized."""
    return np.percentile(np.asarray(values_s) * 1000.0, q, axis=-1)


def per_second(amount: float, seconds: float) -> float:
    """A throughput: ``amount`` over ``seconds`` (0 when no time passed)."""
    return amount / seconds if seconds > 0 else 0.0


def closed_loop_tok_s(concurrency: int, tokens: np.ndarray, latency_s: np.ndarray) -> np.ndarray:
    """Throughput of a closed loop by Little's law: concurrency x tokens / summed latency, per row. Needs no
    wall clock, so it can be computed for resamples of a level's requests (bootstrap intervals)."""
    return concurrency * np.asarray(tokens).sum(axis=-1) / np.asarray(latency_s).sum(axis=-1)


def throughput_span_s(measured: Sequence[RequestRecord], in_flight: float | None) -> float:
    """The seconds a level's throughputs are over (see the module's definitions): its ``measured`` requests'
    summed latency / ``in_flight``, its achieved concurrency; the wall time where that is not known."""
    latency = sum(e2e for r in measured if (e2e := r.e2e_s) is not None)
    return latency / in_flight if in_flight and latency > 0 else wall_time_s(measured)


def wall_time_s(records: Sequence[RequestRecord]) -> float:
    ends = [r.t_last_byte for r in records if r.t_last_byte is not None]
    if not records or not ends:
        return 0.0
    return max(ends) - min(r.t_send for r in records)


def achieved_concurrency(records: Sequence[RequestRecord]) -> float | None:
    """Time-weighted mean of requests in flight over the level's wall time (see the module's definitions);
    None when that span is empty."""
    measured = [r for r in records if not r.warmup]
    ends = [r.t_last_byte for r in measured if r.t_last_byte is not None]
    if not measured or not ends:
        return None
    start, end = min(r.t_send for r in measured), max(ends)
    if end <= start:
        return None
    busy = 0.0
    for r in records:
        finish = r.t_last_byte if r.t_last_byte is not None else r.t_send
        busy += max(0.0, min(finish, end) - max(r.t_send, start))
    return busy / (end - start)


def _per_second(times: Sequence[float]) -> float | None:
    times = sorted(times)
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else None


def achieved_rate(records: Sequence[RequestRecord]) -> float | None:
    """Measured requests sent per second, first send to last (an open loop's achieved arrival rate). In an
    open loop the span starts when the first was due, not when it went out: a late first send (a client
    still spawning its users) would otherwise shorten the span and read as a rate above the schedule's."""
    measured = [r for r in records if not r.warmup]
    sends = [r.t_send for r in measured]
    due = [r.t_scheduled for r in measured if r.t_scheduled is not None]
    if due and len(sends) > 1:
        start, end = min(due), max(sends)
        return (len(sends) - 1) / (end - start) if end > start else None
    return _per_second(sends)


def scheduled_rate(records: Sequence[RequestRecord]) -> float | None:
    """The same over the times the requests were due: what a client that kept up would have achieved. A
    Poisson schedule of a few dozen requests strays well off its nominal rate (32 at 2/s: 1.62/s), so
    this, not the nominal rate, is what the achieved rate is held to."""
    return _per_second([r.t_scheduled for r in records if not r.warmup and r.t_scheduled is not None])


def _arrivals(records: Sequence[RequestRecord]) -> tuple[list[tuple[float, int]], list[list[float]]]:
    """Every time some answer received something (its first content, each chunk, its last byte) with the
    answer's index, sorted, and the union of the answers' streaming spans (first content to last byte), in order."""
    arrivals: list[tuple[float, int]] = []
    streams: list[tuple[float, float]] = []
    for index, record in enumerate(records):
        if record.t_first_token is None or record.t_last_byte is None:
            continue
        streams.append((record.t_first_token, record.t_last_byte))
        times = [record.t_first_token, *(record.t_first_token + np.cumsum(record.itl_ms or ()) / 1000.0), record.t_last_byte]
        arrivals.extend((float(t), index) for t in times)
    covered: list[list[float]] = []
    for start, end in sorted(streams):
        if covered and start <= covered[-1][1]:
            covered[-1][1] = max(covered[-1][1], end)
        else:
            covered.append([start, end])
    return sorted(arrivals), covered


def longest_silence(records: Sequence[RequestRecord]) -> tuple[float, float] | None:
    """(seconds, flush) of the longest time during which some answer was streaming and no answer received
    anything, over every record of a level (warm-up and tails too), and what ended it: the chunks that arrived
    in the FLUSH_WINDOW_S after it, per answer that received any. About one where the engine stepped again (a
    step sends each answer a chunk, a batch's first tokens included); many where the engine went on and its
    chunks were held on their way, then read at once. None where no answer streamed. Pure."""
    arrivals, covered = _arrivals(records)
    if not covered:
        return None
    starts = [start for start, _ in covered]
    longest, ended = 0.0, arrivals[0][0]
    for (before, _), (after, _) in zip(arrivals, arrivals[1:], strict=False):
        stream = bisect.bisect_right(starts, before) - 1
        if stream >= 0 and after <= covered[stream][1] and after - before > longest:
            longest, ended = after - before, after
    times = [t for t, _ in arrivals]
    window = arrivals[bisect.bisect_left(times, ended) : bisect.bisect_right(times, ended + FLUSH_WINDOW_S)]
    return longest, len(window) / max(1, len({index for _, index in window}))


def longest_silence_s(records: Sequence[RequestRecord]) -> float | None:
    """The longest silence's length (``longest_silence``). Pure."""
    return None if (silence := longest_silence(records)) is None else silence[0]


def silence_flush(records: Sequence[RequestRecord]) -> float | None:
    """What ended the longest silence (``longest_silence``); None without one. Pure."""
    return _flush(longest_silence(records))


def _flush(silence: tuple[float, float] | None) -> float | None:
    return None if silence is None or silence[0] <= 0 else silence[1]


def pause_problems(longest_silence_ms: float | None, itl_p99_ms: float | None, flush: float | None = None) -> list[str]:
    """A level during which the server (or the host) paused: nothing streamed for longer than
    PAUSE_FLOOR_S and PAUSE_P99_MULTIPLE times its P99 gap between chunks. ``flush`` (``silence_flush``) says
    which: chunks held and read at once (HELD_FLUSH or more per answer) mean the engine went on while the API
    server or the load generator was off the CPU. Pure."""
    if longest_silence_ms is None or itl_p99_ms is None:
        return []
    limit_ms = max(PAUSE_FLOOR_S * 1000.0, PAUSE_P99_MULTIPLE * itl_p99_ms)
    if longest_silence_ms <= limit_ms:
        return []
    limit = f"(limit {limit_ms / 1000:.1f} s: {PAUSE_P99_MULTIPLE:g}x the P99 gap between chunks, at least {PAUSE_FLOOR_S:g} s)"
    if flush is not None and flush >= HELD_FLUSH:
        return [
            f"the answers were held: nothing arrived for {longest_silence_ms / 1000:.1f} s while answers were streaming "
            f"{limit}, then {flush:.0f} chunks per answer at once: the engine went on, and the API server or the load "
            "generator held its chunks (off the CPU, or busy)"
        ]
    return [f"the server paused: no answer received anything for {longest_silence_ms / 1000:.1f} s while answers were streaming {limit}"]


def level_warnings(metrics: LevelMetrics, cost_only: bool = False) -> tuple[str, ...]:
    """What a reader must know before trusting a level's speed figures, though the level was measured
    cleanly: most answers that never finished. () when there is nothing to say, and for a ``cost_only`` run
    (dummy weights: its answers run to max_tokens by nature, which says nothing of a model). Pure."""
    truncated = metrics.rate_truncated or 0.0
    if not cost_only and metrics.requests and truncated >= TRUNCATED_WARN_SHARE:
        return (
            f"{truncated:.0%} of the answers were cut at max_tokens: the model does not finish these answers, "
            "so the speed figures measure how fast it repeats, not how fast it serves the workload",
        )
    return ()


def level_problems(
    level: float, achieved: float | None, client_cpu_share: float | None, open_loop_rate: float | None = None
) -> list[str]:
    """Why a level does not measure the load it names; [] when it does. A closed loop must hold its users
    busy; an open loop (``open_loop_rate``: its target) must send at its rate (``achieved``: the rate)."""
    problems = []
    if open_loop_rate is not None:
        if achieved is not None and achieved < MIN_CONCURRENCY_SHARE * open_loop_rate:
            problems.append(
                f"achieved rate {achieved:.2f}/s of {open_loop_rate:g}/s ({achieved / open_loop_rate:.0%} < {MIN_CONCURRENCY_SHARE:.0%})"
            )
    elif achieved is not None and achieved < MIN_CONCURRENCY_SHARE * level:
        problems.append(f"achieved concurrency {achieved:.1f} of {level} ({achieved / level:.0%} < {MIN_CONCURRENCY_SHARE:.0%})")
    if client_cpu_share is not None and client_cpu_share >= CLIENT_SATURATED:
        problems.append(f"load generator saturated ({client_cpu_share:.0%} of a core)")
    return problems


@dataclass(frozen=True)
class LevelHealth:
    """Whether a level measured the load it names, and what else ran beside it. ``valid`` None: the run
    predates the check. Noise and client figures None: not measured (no /proc)."""

    valid: bool | None = None
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # measured cleanly, but read its speed with these in mind (``level_warnings``)
    incomplete: bool = False  # the level stopped before its last request
    prefix_cache_reset: bool | None = None  # every cache emptied at its start; None: not recorded
    client_cpu_s_per_request: float | None = None  # the load generator's CPU seconds per request
    client_cpu_share: float | None = None  # ... and the share of a core each of its senders used
    other_cpu_s: float | None = None  # CPU seconds of everything but the server under test and the harness
    other_cpu_share: float | None = None  # ... as a share of the machine's CPU time
    idle_servers_cpu_share: float | None = None  # of which the other arms' idle servers
    steal_share: float | None = None  # CPU time the hypervisor stole
    client_wait_share: float | None = None  # seconds per second the load generator waited for a CPU
    client_read_lateness: float | None = None  # ... what its waits added to a request, a share of the median latency
    api_server_wait_share: float | None = None  # ... and the API server of the server under test
    gpu_utilisation: float | None = None  # the GPUs' mean utilisation over the level (None: no GPU)
    gpu_memory_gib: float | None = None  # the most memory one GPU had in use over the level
    gpu_sm_clock_mhz: float | None = None  # the GPUs' mean SM clock over the level
    gpu_other_processes: tuple[str, ...] | None = None  # compute processes on the GPU not of this run (None: not told)

    @property
    def starved(self) -> tuple[str, ...]:
        """Which processes were starved of CPU over the level, and how much, in words; () when none was."""
        found = []
        if client_starved(self.client_wait_share, self.client_read_lateness):
            found.append(f"the load generator waited for a CPU {self.client_wait_share:.0%} of the level")
        if _starved(self.api_server_wait_share):
            found.append(f"the API server waited for a CPU {self.api_server_wait_share:.0%} of the level")
        return tuple(found)

    @property
    def noise(self) -> tuple[str, ...]:
        """The problems of other work beside the level (other processes, the hypervisor, idle arms)."""
        shares = {"other_cpu_share": self.other_cpu_share or 0.0, "steal_share": self.steal_share or 0.0}
        shares["idle_servers_cpu_share"] = self.idle_servers_cpu_share or 0.0
        beside = set(noise_problems(shares))
        return tuple(problem for problem in self.problems if problem in beside)

    @property
    def load_problems(self) -> tuple[str, ...]:
        """The problems of the load itself (concurrency, rate, the load generator), apart from the noise
        beside it: what a test of the load generator on a shared machine may assert on."""
        noise = self.noise
        return tuple(problem for problem in self.problems if problem not in noise)


def level_health(
    level: float,
    metrics: LevelMetrics,
    client: Mapping[str, float | None],
    noise: Mapping[str, float],
    open_loop_rate: float | None,
    incomplete: bool,
    prefix_cache_reset: bool | None,
    waits: Mapping[str, float | None] | None = None,
    gpu: GpuSample | None = None,
    gpu_others: tuple[str, ...] | None = None,
    cost_only: bool = False,
) -> LevelHealth:
    """A level's health from its metrics, its load generator's cost (``machine.client_load``), the noise
    beside it (``machine.cpu_noise``) and how long its processes waited for a CPU (``machine.starvation``):
    a starved load generator sends and reads late, so the level does not measure the server. ``cost_only``: a
    model with dummy weights (``RunConfig.cost_only``, ``level_warnings``). Pure."""
    waits = waits or {}
    client_share = client.get("client_cpu_share")
    if open_loop_rate is not None:  # held to the rate its schedule really asked for
        problems = level_problems(level, metrics.achieved_rate, client_share, metrics.scheduled_rate or open_loop_rate)
    else:
        problems = level_problems(level, metrics.achieved_concurrency, client_share)
    problems += noise_problems(noise)  # a level measured beside other work measures that work too
    problems += gpu_problems(gpu_others)
    problems += pause_problems(metrics.longest_silence_ms, metrics.itl_p99_ms, metrics.silence_flush)
    client_wait = waits.get("client_wait_share")
    lateness = read_lateness(waits.get("client_wait_per_slice_ms"), metrics.latency_p50_ms)
    if client_starved(client_wait, lateness):
        late = "" if lateness is None else f", its reads {lateness:.1%} of a request's latency late"
        problems.append(f"the load generator was starved: it waited for a CPU {client_wait:.0%} of the level{late}")
    return LevelHealth(
        valid=not problems,
        problems=tuple(problems),
        warnings=level_warnings(metrics, cost_only),
        incomplete=incomplete,
        prefix_cache_reset=prefix_cache_reset,
        client_cpu_s_per_request=client.get("client_cpu_s_per_request"),
        client_cpu_share=client_share,
        other_cpu_s=noise.get("other_cpu_s"),
        other_cpu_share=noise.get("other_cpu_share"),
        idle_servers_cpu_share=noise.get("idle_servers_cpu_share"),
        steal_share=noise.get("steal_share"),
        client_wait_share=client_wait,
        client_read_lateness=lateness,
        api_server_wait_share=waits.get("api_server_wait_share"),
        gpu_utilisation=gpu.utilisation if gpu else None,
        gpu_memory_gib=gpu.memory_gib if gpu else None,
        gpu_sm_clock_mhz=gpu.sm_clock_mhz if gpu else None,
        gpu_other_processes=gpu_others,
    )


SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")


def meets_slo(record: RequestRecord, slo: Mapping[str, float]) -> bool:
    """Valid, and within every service-level objective given (a missing timing cannot meet its SLO)."""
    if record.verdict != Verdict.VALID.value:
        return False
    ttft, e2e = record.ttft_s, record.e2e_s
    tpot = record.tpot_s
    measured = {"ttft_ms": ttft, "tpot_ms": 0.0 if tpot is None else tpot, "e2e_ms": e2e}  # one token: no TPOT to miss
    return all((value := measured[key]) is not None and value * 1000.0 <= limit for key, limit in slo.items())


def cached_share(records: Sequence[RequestRecord]) -> float | None:
    """Prompt tokens served from the prefix cache / prompt tokens, over the records whose server said."""
    told = [r for r in records if r.cached_tokens is not None and r.prompt_tokens]
    return sum(r.cached_tokens or 0 for r in told) / sum(r.prompt_tokens or 0 for r in told) if told else None


def session_metrics(measured: Sequence[RequestRecord]) -> dict[str, Any]:
    """Agent-session figures of a level's measured records (see the module's definitions); {} without
    sessions. A session counts once it has ended: its last turn, or a turn that was not valid."""
    sessions: dict[str, list[RequestRecord]] = {}
    for record in measured:
        if record.session is not None:
            sessions.setdefault(record.session, []).append(record)
    ended = [turns for turns in sessions.values() if any(r.ends_ticket for r in turns)]
    if not ended:
        return {}
    most = max(r.turn or 0 for turns in ended for r in turns) + 1
    return {
        "sessions": len(ended),
        "session_success_rate": sum(all(r.verdict == Verdict.VALID.value for r in turns) and len(turns) == turns[0].turns
                                    for turns in ended) / len(ended),  # fmt: skip
        "turns_per_session": float(np.mean([len(turns) for turns in ended])),
        "cached_prompt_share_by_turn": [cached_share([r for turns in ended for r in turns if r.turn == n]) for n in range(most)],
    }


def level_metrics(records: Sequence[RequestRecord], slo: Mapping[str, float] | None = None) -> LevelMetrics:
    measured = [r for r in records if not r.warmup]
    n = len(measured)
    wall = wall_time_s(measured)
    in_flight = achieved_concurrency(records)
    span = throughput_span_s(measured, in_flight)
    completed = [r for r in measured if r.verdict not in FAILED]
    verdicts = Counter(r.verdict for r in measured)
    tokens = sum(r.output_tokens or 0 for r in measured)
    valid = [r for r in measured if r.verdict == Verdict.VALID.value]
    valid_tokens = sum(r.output_tokens or 0 for r in valid)
    e2e = [r.e2e_s for r in completed if r.e2e_s is not None]
    ttft = [r.ttft_s for r in completed if r.ttft_s is not None]
    tpot = [t for r in completed if (t := r.tpot_s) is not None]
    streamed = [
        (first, last)
        for r in completed
        if (last := r.e2e_s) and (first := r.ttft_s) is not None and (r.output_tokens or 0) > STALL_MIN_TOKENS
    ]
    stalled = [first for first, last in streamed if first >= STALL_SHARE * last]
    itl = [gap for r in completed for gap in (r.itl_ms or ())]
    good = [r for r in measured if meets_slo(r, slo or {})]
    accuracies = [r.field_accuracy for r in valid if r.field_accuracy is not None]
    exact = [r.exact_match for r in valid if r.exact_match is not None]

    def rate(verdict: Verdict) -> float:
        return verdicts[verdict.value] / n if n else 0.0

    return LevelMetrics(
        requests=n,
        completed=len(completed),
        wall_s=wall,
        span_s=span,
        effective_tok_s=per_second(valid_tokens, span),
        raw_tok_s=per_second(tokens, span),
        requests_per_s=per_second(len(completed), span),
        output_tokens=tokens,
        valid_output_tokens=valid_tokens,
        latency_p50_ms=percentile_ms(e2e, 50),
        latency_p95_ms=percentile_ms(e2e, 95),
        latency_p99_ms=percentile_ms(e2e, 99),
        ttft_p50_ms=percentile_ms(ttft, 50),
        ttft_p95_ms=percentile_ms(ttft, 95),
        tpot_mean_ms=float(np.mean(tpot) * 1000) if tpot else None,
        tpot_median_ms=float(np.median(tpot) * 1000) if tpot else None,
        valid_rate=rate(Verdict.VALID),
        invalid_json_rate=sum(rate(v) for v in INVALID_JSON),
        rate_parse_error=rate(Verdict.PARSE_ERROR),
        rate_schema_violation=rate(Verdict.SCHEMA_VIOLATION),
        rate_truncated=rate(Verdict.TRUNCATED),
        rate_http_error=rate(Verdict.HTTP_ERROR),
        rate_timeout=rate(Verdict.TIMEOUT),
        field_accuracy=float(np.mean(accuracies)) if accuracies else None,
        exact_match_rate=float(np.mean(exact)) if exact else None,
        stalled_stream_rate=len(stalled) / len(streamed) if streamed else 0.0,
        achieved_concurrency=in_flight,
        achieved_rate=achieved_rate(records),
        scheduled_rate=scheduled_rate(records),
        send_lag_p95_ms=percentile_ms([r.t_send - r.t_scheduled for r in measured if r.t_scheduled is not None], 95),
        itl_mean_ms=float(np.mean(itl)) if itl else None,
        itl_p50_ms=float(np.percentile(itl, 50)) if itl else None,
        itl_p95_ms=float(np.percentile(itl, 95)) if itl else None,
        itl_p99_ms=float(np.percentile(itl, 99)) if itl else None,
        good_requests=len(good),
        goodput_req_s=per_second(len(good), span),
        good_tok_s=per_second(sum(r.output_tokens or 0 for r in good), span),
        connect_p95_ms=percentile_ms([r.t_connected - r.t_send for r in measured if r.t_connected is not None], 95),
        new_connection_rate=float(np.mean(fresh)) if (fresh := [r.new_connection for r in measured if r.new_connection is not None]) else None,
        cached_prompt_share=cached_share(measured),
        longest_silence_ms=None if (silence := longest_silence(records)) is None else silence[0] * 1000.0,
        silence_flush=_flush(silence),
        **session_metrics(measured),
    )
