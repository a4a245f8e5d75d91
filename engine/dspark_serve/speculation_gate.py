"""Speculation only where it pays, inside vLLM's scheduler and engine core (policy: ``acceptance``).

Per step, in the engine-core process (vLLM 0.32's synchronous path, the CPU's):
- ``Scheduler._update_after_schedule`` (the end of ``Scheduler.schedule``): when the drafter's pass
  would not pay for the whole batch's step (the tokens the requests that may draft would gain, against
  the pass's measured cost: ``acceptance.pass_pays``), the step's ``num_spec_tokens_to_schedule``
  (what the worker drafts after it) becomes 0, except at probe steps.
  The worker then skips the drafter (a one-pass drafter only stores the step's context:
  ``dflash_fixes``);
- ``EngineCore.post_step``: after a step the worker did not draft for, no round trip to fetch drafts;
- ``Scheduler.update_draft_token_ids``: each request's new drafts are cut to its ``draft_budget``
  before the grammar walks them; a request at 0 keeps its drafts aside as a shadow, unverified;
- ``Scheduler.update_from_output``: verified drafts and resolved shadows update each request's
  acceptance.

Under vLLM's asynchronous scheduling (a GPU's default for dflash, draft_model and dspark) the drafts stay
in the worker: the engine core schedules ``-1`` placeholders for the next step, the worker fills them in,
and ``update_draft_token_ids`` never runs. There ``AsyncScheduler._update_after_schedule`` cuts each
request's placeholders to its budget, which the worker honours (it copies the first ones of each request's
drafts). No shadow can judge a request that verifies nothing, so a request not yet judged verifies its
drafts once, and one whose drafts do not pay verifies them again every ``REJUDGE_STEPS`` steps. With
``uniform`` (the default there), every request of a step verifies vLLM's length or none does, and a batch that
stopped drafting is probed whole at even steps (``uniform_probe_gap``).

Above all of this, the ``governor`` measures tokens per second per batch size with speculation allowed and
with it off, and turns it off where plain steps are faster: on such steps the worker does not draft, and
no engine-core drafts are made (``speculating``); the drafter's context is still kept, so drafting resumes
from a fresh one.

A request is *dormant* once it has been judged (a verified step or a shadow), its drafts do not pay,
and no shadow is pending. On steps where the drafter does not run, the worker stops storing a dormant
request's context for the drafter (``CONTEXT_IDS``, read by ``dflash_fixes``), which on a CPU costs
about a tenth of a decoding step per token. Drafts made for it later (when another request drafts)
still become shadows, so it can draft again. At a batch size where vLLM's load-aware length is 0, no
request's context is kept at all. A new request on a server whose drafts pay drafts from its
first step. On one whose drafts do not, probes judge new requests: once a probe is due, the next request
to arrive is kept from its first step, and, if a pass could pay were its drafts to land, the drafter runs
after that step and its drafts become a shadow. The requests that arrive between probes are neither kept
nor judged. Probes start ``YOUNG_PROBE`` steps apart, and the gap doubles after each, up to
``LONGEST_PROBE_GAP``, until some request's drafts pay. So a workload whose drafts never land pays one
drafter pass per ``LONGEST_PROBE_GAP`` steps and the context of the one request each judges, and a
workload whose drafts start to land again is found within that many steps.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dspark_serve.acceptance import (
    DRAFT_COST,
    POPULATION_DECAY,
    VERIFY_COST,
    Acceptance,
    StepCosts,
    draft_budget,
    landed,
    pass_pays,
    uniform_pays,
    verified_drafts,
)
from dspark_serve.governor import Governor
from dspark_serve.state import CONTEXT_IDS, ENGINE_DRAFTED, EngineCounters

HOOKED = (  # the vLLM methods its hooks run on (targets/ installs them)
    "vllm.v1.core.sched.scheduler:Scheduler._update_after_schedule",
    "vllm.v1.core.sched.async_scheduler:AsyncScheduler._update_after_schedule",
    "vllm.v1.core.sched.scheduler:Scheduler.update_from_output",
    "vllm.v1.core.sched.scheduler:Scheduler.update_draft_token_ids",
    "vllm.v1.engine.core:EngineCore.post_step",
)
# Read, not replaced: the SchedulerOutput field the worker drafts by, and the Request fields the gate reads.
READS = (
    "vllm.v1.core.sched.output:SchedulerOutput.num_spec_tokens_to_schedule",
    "vllm.config:SchedulerConfig.async_scheduling",
    "vllm.v1.request:Request.num_tokens",
    "vllm.v1.request:Request.num_tokens_with_spec",  # how the scheduler schedules the placeholders left after the cut
    "vllm.v1.core.sched.output:SchedulerOutput.num_scheduled_tokens",
)
# Steps between probes (drafter runs while no request drafts, to judge new requests) on a server whose drafts
# do not pay: the gap starts at YOUNG_PROBE and doubles after each probe, up to LONGEST_PROBE_GAP, until a
# request's drafts pay again. Where drafts pay, a new request drafts from its first step anyway (its prior
# is the server's recent acceptance), so this only paces the probes of a server whose drafts miss. At 4
# steps, such a workload ran the drafter after one step in six at 8 users (benchmarks/dspark/RESULTS.md,
# tax-c), most of an 18% tax; at 32, a probe and the context kept for it were ~8% of the worker's time at
# 1 user on plain text by a profile (`nothing-lands-s13/profile`), though the benchmark did not resolve the gain.
YOUNG_PROBE = 32
LONGEST_PROBE_GAP = 512
HOPEFUL_RATE = Acceptance().rate  # what a probe might find: drafts that land as the drafter's on JSON it knows
# Under asynchronous scheduling with ``uniform`` every running request verifies a probe's drafts, so one probe
# re-judges the whole batch, at the price of its verified positions and the drafter's pass; probes then come at
# even steps, as many as cost at most PROBE_SHARE of the steps' time (never closer than YOUNG_PROBE), instead of
# doubling their gap: with the gap doubled to 512 steps, on an H100 at 8 users the gate drafted after 0.4% of
# the steps in one repeat and 69% in another of the same level (benchmarks/gpu/h100-s55-order-1-8, dspark-ngram).
PROBE_SHARE = 0.01
# Asynchronous scheduling: steps a request whose drafts do not pay waits before it verifies a set again (a
# shadow's work, at the price of the verified positions, which on a GPU's wide steps is small).
REJUDGE_STEPS = 32
SAY_EVERY = 64  # steps between updates of the measured costs and what they choose (for /dspark/status)


def uniform_probe_gap(drafts: int, verify_cost: float, draft_cost: float) -> int:
    """Steps between probes of a uniform batch: a probe (``drafts`` verified positions a request and the drafter's
    pass, as shares of a plain step) every so many steps that probes cost at most ``PROBE_SHARE``."""
    price = draft_cost + verify_cost * max(drafts, 0)
    return max(YOUNG_PROBE, min(LONGEST_PROBE_GAP, math.ceil(price / PROBE_SHARE)))


@dataclass
class Shadow:
    """Drafts kept aside for a request that did not verify them: where they start in its tokens."""

    start: int
    drafts: list[int]


@dataclass
class SpeculationGate:
    """Per-request acceptance, shadows, and whether the worker drafts after the step in flight."""

    counters: EngineCounters | None = None
    history: dict[str, Acceptance] = field(default_factory=dict)
    population: Acceptance = field(default_factory=Acceptance)  # every request's drafts, slower to forget
    shadows: dict[str, Shadow] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)  # this step's requests whose grammar refused a draft
    drafting: bool = True  # whether the worker drafts after the step being executed
    since_drafted: int = 0  # steps since the worker last drafted
    probe_gap: int = YOUNG_PROBE  # steps from one probe to the next, while no request's drafts pay
    # Requests not yet judged: whether their context is kept from their first step (so a probe can judge
    # them). Where drafts do not pay, only those that arrive once a probe is due are.
    young_kept: dict[str, bool] = field(default_factory=dict)
    waited: dict[str, int] = field(default_factory=dict)  # asynchronous scheduling: steps since last judged
    costs: StepCosts = field(default_factory=StepCosts)
    governor: Governor | None = field(default_factory=Governor)  # None: no end-to-end check of the gate's choices
    # Asynchronous scheduling: every request of a step verifies vLLM's length for the batch, or none does
    # (``uniform_pays``), so the step stays the uniform batch vLLM's full CUDA graphs are captured for; False:
    # each request cut to its own budget (``slots``).
    uniform: bool = True
    speculating: bool = True  # the governor's mode for the step being planned
    relative_costs: tuple[float, float] = (VERIFY_COST, DRAFT_COST)  # costs.relative() for this step's batch
    # Steps scheduled and not yet finished, oldest first: (started, positions, drafter runs after it, batch,
    # governor's mode, among its epoch's first steps). One on the synchronous path; two under asynchronous
    # scheduling, which schedules a step while the one before runs.
    _in_flight: deque[tuple[float, int, bool, int, bool, bool]] = field(default_factory=deque)
    _batch: int = 0
    _last_finished: float | None = None
    _steps_since_said: int = 0

    def rate(self, request_id: str) -> float:
        """The request's recent acceptance; a new request's is the server's."""
        return (self.history.get(request_id) or self.population.prior()).rate

    def plain_step_seconds(self) -> float | None:
        """A plain step of the batch being planned, in seconds, as measured so far (None: not yet)."""
        return self.costs.plain_seconds(self._batch)

    def budget(self, request_id: str, longest: int) -> int:
        return draft_budget(self.rate(request_id), longest, *self.relative_costs)

    def step_started(self, positions: int, asynchronous: bool = False) -> None:
        """A step of ``positions`` was scheduled; ``asynchronous``: by vLLM's asynchronous scheduler, whose
        drafts are cut by ``slots`` instead of ``cut`` (counted, so the status can say which path ran)."""
        settling = self.governor is not None and self.governor.settling
        self._in_flight.append((time.perf_counter(), positions, self.drafting, self._batch, self.speculating, not settling))
        if asynchronous and self.counters is not None:
            self.counters.add("async_steps")

    def step_finished(self, tokens: int = 0) -> None:
        """The oldest step's worker time (forward, sampling, and the drafter's pass when it ran) into the fit:
        from its scheduling, or, where it was scheduled while the step before still ran (asynchronous
        scheduling), from that step's end; with the ``tokens`` it wrote, into the governor's speeds."""
        if self._in_flight:
            started, positions, drafted, batch, speculated, settled = self._in_flight.popleft()
            now = time.perf_counter()
            seconds = now - max(started, self._last_finished or started)
            self._last_finished = now
            self.costs.record(positions, drafted, seconds)
            if self.governor is not None:
                self.governor.finished(batch, speculated, tokens, seconds, settled)
            self._steps_since_said += 1
            if self.counters is not None and (fitted := self.costs.fitted) is not None and self._steps_since_said >= SAY_EVERY:
                self._steps_since_said = 0
                for name, seconds in zip(("step_fixed_us", "step_per_position_us", "drafter_pass_us"), fitted, strict=True):
                    if seconds == seconds:
                        self.counters.set(name, int(seconds * 1e6))
                self.counters.set("drafts_pay_to_batch", self.drafts_pay_to_batch())

    def drafts_pay_to_batch(self, longest: int = 12, largest: int = 256) -> int:
        """The largest batch (up to ``largest``) at which a request with the server's recent acceptance
        verifies a draft, by the costs measured so far; 0 where none does."""
        rate = self.population.rate

        def pays(batch: int) -> bool:
            return draft_budget(rate, longest, *self.costs.relative(batch)) > 0

        # For each number of drafts, drafting's cost per request ((pass + verified positions) / plain step) is
        # monotone in the batch, so where neither end pays no batch between does: two budgets, not 256, where
        # drafts miss (this runs in the engine core every SAY_EVERY steps).
        if not pays(1) and not pays(largest):
            return 0
        return next((b for b in range(largest, 0, -1) if pays(b)), 0)

    def record(self, request_id: str, drafted: int, accepted: int) -> None:
        if request_id not in self.history:
            self.history[request_id] = self.population.prior()
        self.history[request_id].record(drafted, accepted)
        self.population.record(drafted, accepted, POPULATION_DECAY)

    def dormant(self, request_id: str, longest: int) -> bool:
        """Judged, its drafts do not pay, and no shadow pending: it will not draft again."""
        return request_id in self.history and request_id not in self.shadows and self.budget(request_id, longest) == 0

    def plan_step(self, running_ids: Sequence[str], longest: int, asynchronous: bool = False) -> tuple[int, list[str]]:
        """Drafts per request the worker makes after this step: ``longest`` (vLLM's choice for this batch)
        when the pass pays for the batch's step or a probe is due, else 0; and the running
        requests whose context the drafter should keep (all but the dormant ones, and the new ones no
        probe will judge). Scheduled ``asynchronous``ly with ``uniform``: ``longest`` where every running
        request verifying that many pays for the batch (``uniform_pays``), and then every running request's
        context is kept, as every one verifies drafts."""
        self.relative_costs = self.costs.relative(len(running_ids))  # once per step: budget() runs per request
        self._batch = len(running_ids)
        was = self.speculating
        self.speculating = self.governor is None or not running_ids or self.governor.speculate(len(running_ids))
        if self.counters is not None and running_ids:
            self.counters.add("plain_steps", 0 if self.speculating else 1)
            self.counters.add("governor_switches", 1 if was != self.speculating else 0)
        # Where vLLM's load-aware length is 0 no request can draft after this step, so no context is kept. If
        # the batch shrinks later, such a request drafts from a stale context, misses, and goes dormant.
        uniform = asynchronous and self.uniform
        live = [r for r in running_ids if not self.dormant(r, longest)] if longest > 0 else []
        batch = len(running_ids), longest, *self.relative_costs
        rates = [self.rate(r) for r in live]
        # Whether a pass pays is the gate's judgement; whether it runs is also the governor's. A plain epoch of
        # the governor keeps the context of the requests that would draft, new ones too, so that speculation
        # resumes from a fresh context: a request whose context has gaps drafts from it, misses, goes dormant,
        # and decodes a token a step for the rest of its life (the tail of a P95), and those misses make
        # speculation look slower than it is to the governor.
        if uniform:  # every running request would verify the drafts, the dormant ones too
            pays = bool(live) and uniform_pays([self.rate(r) for r in running_ids], longest, *self.relative_costs)
        else:
            pays = bool(live) and pass_pays(rates, *batch)
        anyone = self.speculating and pays
        self.since_drafted += 1
        due = self.since_drafted >= self.probe_gap  # a probe, if hopeful, runs after this step
        young = [r not in self.history and r not in self.shadows for r in live]
        for request_id, new in zip(live, young, strict=True):
            if new and request_id not in self.young_kept:
                self.young_kept[request_id] = pays or due
        # A probe judges the young requests kept from their first step; it is worth its pass only if their
        # drafts, landing as JSON drafts mostly do, could make a pass pay. The others' context is not kept (if
        # drafts start to pay, such a request drafts from a stale context, misses, and goes dormant).
        probed = [y and self.young_kept[r] for r, y in zip(live, young, strict=True)]
        if pays or not any(probed):
            hopeful = pays
        else:
            hopeful = pass_pays([HOPEFUL_RATE if p else rate for rate, p in zip(rates, probed, strict=True)], *batch)
        if not pays:
            live = [r for r, y, p in zip(live, young, probed, strict=True) if not y or (p and hopeful)]
        if uniform:  # a probe re-judges every running request, not only the young ones
            probing = self.speculating and not anyone and due and bool(running_ids) and longest > 0
        else:
            probing = self.speculating and not anyone and hopeful and due
        self.drafting = anyone or probing
        if self.drafting:
            self.since_drafted = 0
            if uniform:
                live = list(running_ids)
        if uniform:
            self.probe_gap = uniform_probe_gap(longest, *self.relative_costs)
        elif anyone:
            self.probe_gap = YOUNG_PROBE
        elif probing:
            self.probe_gap = min(2 * self.probe_gap, LONGEST_PROBE_GAP)
        if self.counters is not None and running_ids:
            self.counters.add("engine_steps")
            if self.drafting:
                self.counters.add("drafter_steps")
                if not anyone:
                    self.counters.add("probe_steps")
        return (longest if self.drafting else 0), live

    def slots(self, request_id: str, longest: int) -> int:
        """Draft positions the request verifies in its next step under asynchronous scheduling, of the
        ``longest`` the worker drafts after this one: its budget; where that is 0, all of them once if it
        was never judged, or if ``REJUDGE_STEPS`` steps passed since it last was (what a shadow does on the
        synchronous path)."""
        if longest <= 0:
            return 0
        keep = self.budget(request_id, longest)
        if keep > 0 or request_id not in self.history:
            self.waited.pop(request_id, None)
            return keep or longest
        waited = self.waited.get(request_id, 0) + 1
        if waited >= REJUDGE_STEPS:
            self.waited.pop(request_id, None)
            return longest
        self.waited[request_id] = waited
        return 0

    def cut(self, request_ids: Sequence[str], drafts: list[list[int]], requests: Mapping[str, Any]) -> None:
        """Cut each request's new drafts (in place) to its budget; a request at 0 keeps them as a shadow."""
        self.refused = {}
        for i, request_id in enumerate(request_ids):
            proposed = drafts[i]
            keep = self.budget(request_id, len(proposed))
            if keep >= len(proposed):
                continue
            request = requests.get(request_id)
            if keep == 0 and request is not None and request_id not in self.shadows and not getattr(request, "is_prefill_chunk", False):
                self.shadows[request_id] = Shadow(request.num_tokens, [int(t) for t in proposed])
            drafts[i] = list(proposed[:keep])

    def validated(self, request_id: str, drafted: int, kept: int) -> None:
        """The request's grammar kept ``kept`` of its ``drafted`` drafts (vLLM's ``validate_tokens`` cuts at
        the first token it refuses). A refused draft is a miss like a rejected one; else drafts the grammar
        refuses at once are never verified, so never judged, and the drafter keeps running for them."""
        if kept >= drafted:
            return
        if kept == 0:
            self.record(request_id, 1, 0)  # nothing left to verify: the miss is known now
        else:
            self.refused[request_id] = kept  # a miss after the kept drafts, unless verification finds one first

    def after_step(
        self,
        scheduled_drafts: Mapping[str, Sequence[int]],
        index_of: Mapping[str, int],
        sampled: Sequence[Sequence[int]],
        requests: Mapping[str, Any],
        placeholders: bool = False,
    ) -> None:
        """Record the step's verified drafts (the learned drafter's, not the engine core's), resolve shadows
        whose tokens are written, forget finished requests. ``placeholders``: the step was scheduled
        asynchronously (``verified_drafts``)."""
        for request_id, drafted, accepted in verified_drafts(scheduled_drafts, index_of, sampled, placeholders):
            if self.refused.pop(request_id, None) is not None and accepted >= drafted:
                drafted += 1  # every kept draft landed: the miss is the next one, which the grammar refused
            if not getattr(requests.get(request_id), ENGINE_DRAFTED, None):  # engine_drafts books those
                self.record(request_id, drafted, accepted)
        for request_id, shadow in list(self.shadows.items()):
            request = requests.get(request_id)
            if request is None:
                del self.shadows[request_id]
                continue
            written = request.all_token_ids[shadow.start : shadow.start + len(shadow.drafts)]
            hits = landed(shadow.drafts, written)
            if hits < len(written) or len(written) == len(shadow.drafts):  # a miss seen, or every draft checked
                self.record(request_id, len(shadow.drafts), hits)
                del self.shadows[request_id]
        for table in (self.history, self.waited):
            if len(table) > len(requests):  # a finished request's: not read again, so dropped once they outnumber
                for request_id in [r for r in table if r not in requests]:
                    del table[request_id]
        for request_id in [r for r in self.young_kept if r in self.history or r not in requests]:
            del self.young_kept[request_id]


class GateHooks:
    """The gate's hooks on the scheduler (``targets.scheduler``) and the engine core (``targets.engine_core``)."""

    def __init__(self, gate: SpeculationGate) -> None:
        self.gate = gate

    def update_after_schedule(self, proceed, scheduler, output):
        """The step's plan, before vLLM's own update: the asynchronous scheduler sizes its placeholders by
        ``num_spec_tokens_to_schedule`` there."""
        gate = self.gate
        if output.total_num_scheduled_tokens > 0:
            running = [request.request_id for request in scheduler.running]
            asynchronous = bool(scheduler.scheduler_config.async_scheduling)
            output.num_spec_tokens_to_schedule, live = gate.plan_step(running, output.num_spec_tokens_to_schedule, asynchronous)
            setattr(output, CONTEXT_IDS, None if len(live) == len(running) else frozenset(live))
            gate.step_started(output.total_num_scheduled_tokens, asynchronous)
        return proceed(output)

    def async_update_after_schedule(self, proceed, scheduler, output):
        """Each request's draft placeholders cut to its budget (the worker copies the first ones); with a
        ``uniform`` gate, none: the step's one length was chosen in ``update_after_schedule``."""
        result = proceed(output)
        longest = output.num_spec_tokens_to_schedule
        for request_id in output.num_scheduled_tokens if longest > 0 and not self.gate.uniform else ():
            request = scheduler.requests[request_id]
            if not request.is_prefill_chunk and (keep := self.gate.slots(request_id, longest)) < len(request.spec_token_ids):
                request.spec_token_ids = request.spec_token_ids[:keep]
        return result

    def update_from_output(self, proceed, scheduler, scheduler_output, model_runner_output):
        gate = self.gate
        gate.step_finished(sum(len(tokens) for tokens in model_runner_output.sampled_token_ids or []))
        outputs = proceed(scheduler_output, model_runner_output)
        gate.after_step(
            scheduler_output.scheduled_spec_decode_tokens,
            model_runner_output.req_id_to_index,
            model_runner_output.sampled_token_ids or [],
            scheduler.requests,
            bool(scheduler.scheduler_config.async_scheduling),
        )
        return outputs

    def update_draft_token_ids(self, proceed, scheduler, draft_token_ids):
        """Drafts cut to each request's budget before the grammar walks them, then what survived noted."""
        gate = self.gate
        gate.cut(draft_token_ids.req_ids, draft_token_ids.draft_token_ids, scheduler.requests)
        wanted = [len(drafts) for drafts in draft_token_ids.draft_token_ids]
        result = proceed(draft_token_ids)
        for request_id, drafted in zip(draft_token_ids.req_ids, wanted, strict=True):
            request = scheduler.requests.get(request_id)
            if drafted and request is not None and not request.is_finished() and not request.is_prefill_chunk:
                gate.validated(request_id, drafted, len(request.spec_token_ids))
        return result

    def post_step(self, proceed, engine, model_executed):
        """No round trip for drafts after a step the worker did not draft for."""
        if self.gate.drafting:
            proceed(model_executed)
