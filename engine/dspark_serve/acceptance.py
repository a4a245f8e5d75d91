"""Which requests draft, and how far: speculation only where it pays, measured request by request.

A drafter trained on one kind of answer drafts well there and poorly elsewhere (the shipped one-pass
drafter lands ~11 of 12 drafts on the scenarios' JSON, ~1 on schemas it never saw). Speculation has
two prices: each verified draft costs a position of the verification step, landed or not, and any
drafting at all costs the drafter's pass and a round trip between the engine core and the worker
(on the 2-core CPU machine about as much as half a plain decoding step). So per request, from what
its drafts recently landed, ``draft_budget`` picks the number of drafts ``n`` that maximises expected
tokens per unit of step cost under a geometric model of acceptance:

    tokens(n) = 1 + rate + rate^2 + ... + rate^n        cost(n) = 1 + DRAFT_COST + VERIFY_COST * n
    tokens(0) = 1                                       cost(0) = 1

``rate`` (the chance that a draft lands given the one before it did) is the censored-geometric
estimate accepted / (accepted + first rejections), with recent steps weighted more (``DECAY``). A new
request starts from the server's recent acceptance over all requests (``population``, slower to
forget), worth ``PRIOR_WEIGHT`` of its own steps: on a workload whose drafts land it drafts from its
first step, on one whose drafts miss it does not draft at all until a shadow says they would land. ``n = 0`` means the request schedules no draft positions: no
bitmask rows, no grammar walk, no verification.

A request at ``n = 0`` earns its drafts back by *shadow* checks: drafts made for it anyway (because
another request in the batch drafts, or to judge a new request) are kept aside unverified and compared
with the tokens the target really wrote next (``landed``); what would have landed is recorded as if
it had been verified. When no request drafts, the drafter does not run at all.
``speculation_gate`` applies all of this inside vLLM.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from dspark_serve.state import EngineCounters

# Until ``StepCosts`` has measured this machine: one more verified position as a share of a step's fixed cost. Measured on the 2-core CPU machine at
# one user: 9 positions 12.5 ms against 7.3 for one (0.65 ms each).
VERIFY_COST = 0.05
# Drafting at all, as a share of a plain step: the drafter's pass plus the extra engine/worker round
# trip. Measured on a 2-core AMD EPYC at one user: stock 328 tok/s against 170-180 with speculation on
# where almost nothing landed (shared/design/field-notes.md), i.e. ~0.85 of a step; the one-pass
# drafter's own pass ~4.5 ms of a 7.3 ms step on the AMX Xeon (0.6). 0.5 leans towards drafting.
DRAFT_COST = 0.5
# The same before it is measured, where a drafter's pass is no such price: vLLM's ngram_gpu looks the prompt up
# on the GPU inside the step (no forward pass) and keeps asynchronous scheduling (no round trip). At 0.5 its
# drafts at the ~0.35 rate they land on order_extraction never paid, so the pass was never run often enough to
# be measured (benchmarks/gpu/h200-s53-ngram-ab: 35-1,510 drafts a level where vLLM's own ngram_gpu made ~4,900).
PRIOR_DRAFT_COSTS = {"ngram_gpu": 0.05}
DECAY = 0.8  # weight of a step one step older; ~5 steps of memory
POPULATION_DECAY = 0.98  # the server-wide estimate: ~50 steps of memory
PRIOR_ACCEPTED, PRIOR_REJECTED = 4.0, 0.5  # before anything was verified: rate 0.89, drafts on JSON mostly land
PRIOR_WEIGHT = 2.0  # a new request's prior, in accepted + rejected units of its own steps


@dataclass
class Acceptance:
    """One request's recent drafts: accepted tokens and first rejections, both decayed per step."""

    accepted: float = PRIOR_ACCEPTED
    rejected: float = PRIOR_REJECTED

    def record(self, drafted: int, accepted: int, decay: float = DECAY) -> None:
        if drafted <= 0:
            return
        self.accepted = decay * self.accepted + accepted
        self.rejected = decay * self.rejected + (1.0 if accepted < drafted else 0.0)

    @property
    def rate(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def prior(self, weight: float = PRIOR_WEIGHT) -> Acceptance:
        """A new request's starting point: this estimate's rate, worth ``weight``."""
        return Acceptance(weight * self.rate, weight * (1.0 - self.rate))


def draft_budget(rate: float, longest: int, verify_cost: float = VERIFY_COST, draft_cost: float = DRAFT_COST) -> int:
    """Drafts to verify (0..``longest``) that maximise expected tokens per unit of step cost; 0 when no
    number of drafts pays for drafting at all. Rates and costs are rounded (to 0.001 and 0.0001) so that the
    engine core, which asks per request per step, mostly finds the answer cached."""
    return _draft_budget(round(rate, 3), longest, round(verify_cost, 4), round(draft_cost, 4))


@functools.lru_cache(maxsize=1 << 16)
def _draft_budget(rate: float, longest: int, verify_cost: float, draft_cost: float) -> int:
    best, best_value, tokens, term = 0, 1.0, 1.0, 1.0
    for n in range(1, max(longest, 0) + 1):
        term *= rate
        tokens += term
        value = tokens / (1.0 + draft_cost + verify_cost * n)
        if value > best_value:
            best, best_value = n, value
    return best


def uniform_pays(rates: Sequence[float], drafts: int, verify_cost: float = VERIFY_COST, draft_cost: float = DRAFT_COST) -> bool:
    """Whether every request of a batch with these ``rates`` verifying ``drafts`` drafts beats a plain step:
    expected tokens per unit of step cost, per request,

        tokens = 1 + mean(rate) + mean(rate^2) + ... + mean(rate^drafts)       cost = 1 + draft_cost + verify_cost * drafts

    against 1. All or nothing, not a shorter length: on a GPU vLLM 0.32's V2 model runner replays a full CUDA
    graph for a batch whose requests all verify the same number of positions (one set of graphs per draft
    length of the load-aware schedule); a batch of requests cut to different lengths runs piecewise graphs."""
    if not len(rates) or drafts <= 0:
        return False
    # In numpy, at draft_budget's rounding: this runs in the engine core every step, over the whole batch
    rounded = np.round(np.asarray(rates, dtype=np.float64), 3)
    gain = float(np.cumprod(np.repeat(rounded[:, None], drafts, axis=1), axis=1).sum()) / len(rounded)
    return gain > draft_cost + verify_cost * drafts


@dataclass
class EngineDraftSource:
    """Drafts made in the engine core with no drafter pass (``engine_drafts``): per request, their own acceptance
    and the budget it pays for (no drafting cost); per server, the counts of those verified and landed."""

    PRIOR: ClassVar[Acceptance] = Acceptance()  # a new request's acceptance of this source's drafts
    COUNTED: ClassVar[tuple[str, str]] = ("", "")  # its counters (state.COUNTERS): drafts verified, drafts landed

    counters: EngineCounters | None = None
    verify_cost: Callable[[], float] = lambda: 0.0  # one more verified position, as a share of a step
    history: dict[str, Acceptance] = field(default_factory=dict)

    def rate(self, request_id: str) -> float:
        return (self.history.get(request_id) or self.PRIOR).rate

    def budget(self, request_id: str, available: int) -> int:
        return draft_budget(self.rate(request_id), available, self.verify_cost(), 0.0)

    def record(self, request_id: str, drafted: int, accepted: int) -> None:
        self.history.setdefault(request_id, replace(self.PRIOR)).record(drafted, accepted)

    def verified(self, request_id: str, drafted: int, accepted: int) -> None:
        if drafted <= 0:
            return
        self.record(request_id, drafted, accepted)
        if self.counters is not None:
            self.counters.add(self.COUNTED[0], drafted)
            self.counters.add(self.COUNTED[1], min(accepted, drafted))

    def per_request(self) -> tuple[dict[str, Any], ...]:
        """The tables keyed by request, emptied of finished requests by ``forget``."""
        return (self.history,)

    def forget(self, live: Mapping[str, Any]) -> None:
        for table in self.per_request():
            for request_id in [r for r in table if r not in live]:
                del table[request_id]


def pass_pays(rates: Sequence[float], batch: int, longest: int, verify_cost: float, draft_cost: float) -> bool:
    """Whether one drafter pass after this step raises the batch's tokens per unit of step cost. Units: one
    request's part of a plain step, so the plain step is ``batch`` and yields ``batch`` tokens; the pass costs
    ``draft_cost * batch`` (``draft_cost``: its share of a plain step), whichever requests it drafts for. Each
    request in ``rates`` (those that may draft) verifies the drafts that pay once the pass is spent, gaining
    ``rate + rate^2 + ...`` tokens for ``verify_cost`` each. A pass for one request of eight is weighed
    against the eight's step, not against that request's share of it."""
    verify_cost = round(verify_cost, 4)
    gain = sum(_sunk_gain(round(rate, 3), longest, verify_cost) for rate in rates)
    return gain > draft_cost * max(batch, 1)


@functools.lru_cache(maxsize=1 << 16)
def _sunk_gain(rate: float, longest: int, verify_cost: float) -> float:
    """Expected tokens gained, less the verified positions' cost, by a request's drafts once the pass is spent."""
    n = _draft_budget(rate, longest, verify_cost, 0.0)
    return _landing(rate, n) - verify_cost * n


@functools.lru_cache(maxsize=1 << 16)
def _landing(rate: float, drafts: int) -> float:
    """Expected drafts accepted of ``drafts`` verified: rate + rate^2 + ... + rate^drafts."""
    return sum(rate**k for k in range(1, drafts + 1))


def verified_drafts(
    scheduled: Mapping[str, Sequence[int]],
    index_of: Mapping[str, int],
    sampled: Sequence[Sequence[int]],
    placeholders: bool = False,
) -> Iterator[tuple[str, int, int]]:
    """Per request of a step that verified drafts: (request, drafts verified, drafts accepted). ``scheduled``:
    the step's drafts per request (-1: one the grammar refused); ``sampled``: its tokens per request, by
    ``index_of`` (the accepted drafts, then the bonus token). ``placeholders``: vLLM's asynchronous
    scheduling, where every scheduled position is a draft the worker fills in (-1 here), and one the grammar
    refused stays -1 and is verified as a miss."""
    for request_id, drafts in scheduled.items():
        index = index_of.get(request_id)
        if index is not None and index < len(sampled):
            drafted = len(drafts) if placeholders else sum(1 for token in drafts if token >= 0)
            yield request_id, drafted, max(len(sampled[index]) - 1, 0)


def landed(drafts: Sequence[int], written: Sequence[int]) -> int:
    """How many of ``drafts`` the target would have accepted, given the tokens it really ``written`` from
    the same position: the length of their common prefix."""
    count = 0
    for draft, token in zip(drafts, written, strict=False):
        if draft != token:
            break
        count += 1
    return count


MIN_DRAFTED_STEPS = 5  # steps with and without the drafter's pass before its cost is taken from the fit
REFIT_EVERY = 16  # steps between fits: costs drift over seconds, and a solve every step is engine-core time


@dataclass
class StepCosts:
    """What a step costs on this machine, measured while serving: a least-squares fit, forgetting old
    steps (``decay``), of each step's seconds as fixed + per scheduled position + the drafter's pass.

    A CPU without wide bf16 units pays for every position it verifies almost as much as for a decoding
    step (a 2-core AMD EPYC with AVX2: 13 positions ~10x one), one with AMX almost nothing; so the
    costs ``draft_budget`` weighs come from the machine at hand, not from a table."""

    decay: float = 0.995
    # The decayed sums of the least-squares normal equations, as plain floats (numpy's per-call overhead on
    # a 3x3 outer product costs more than the arithmetic, once per engine step). With x = (1, positions,
    # drafted) and y = seconds: 1, p, d, p*p, p*d, y, p*y, d*y (d*d = d: drafted is 0 or 1).
    sums: list[float] = field(default_factory=lambda: [0.0] * 8)
    fitted: tuple[float, float, float] | None = None  # ``fit()`` as of the last refit
    recorded: int = 0
    draft_prior: float = DRAFT_COST  # the drafter's pass until measured (``prior_draft_cost``)
    # The pass as last measured: where drafting then stops, steps with the pass grow too rare to tell it apart
    # again, and falling back to the prior would keep drafting off for a reason nobody measured.
    measured_pass: float = float("nan")

    def record(self, positions: int, drafted: bool, seconds: float) -> None:
        p, d = float(positions), 1.0 if drafted else 0.0
        added = (1.0, p, d, p * p, p * d, seconds, p * seconds, d * seconds)
        self.sums = [self.decay * total + value for total, value in zip(self.sums, added, strict=True)]
        self.recorded += 1
        if self.fitted is None or self.recorded % REFIT_EVERY == 0:
            self.fitted = self.fit()

    def fit(self) -> tuple[float, float, float] | None:
        """(fixed, per position, drafter pass) in seconds; None until the steps seen tell fixed and per position
        apart; the pass as last measured (nan: never) where they do not tell it apart."""
        steps, p, d, pp, pd, y, py, dy = self.sums
        if steps < 20:
            return None
        normal, target = np.array([[steps, p, d], [p, pp, pd], [d, pd, d]]), np.array([y, py, dy])
        # The drafter's pass is told apart from the fixed cost only where both kinds of step were seen.
        columns = [0, 1, 2] if min(d, steps - d) >= MIN_DRAFTED_STEPS else [0, 1]
        system = normal[np.ix_(columns, columns)] + 1e-12 * np.eye(len(columns))
        try:
            solved = np.linalg.solve(system, target[columns])
        except np.linalg.LinAlgError:
            return None
        fixed, per_position = max(float(solved[0]), 1e-6), max(float(solved[1]), 0.0)
        if len(columns) == 3:
            self.measured_pass = max(float(solved[2]), 0.0)
        return fixed, per_position, self.measured_pass

    def plain_seconds(self, batch: int) -> float | None:
        """A plain step of ``batch`` requests, in seconds, as measured; None until measured."""
        if self.fitted is None:
            return None
        fixed, per_position, _ = self.fitted
        return fixed + per_position * max(batch, 1)

    def relative(self, batch: int) -> tuple[float, float]:
        """(VERIFY_COST, DRAFT_COST) for one request of a ``batch``: one more verified position, and the
        drafter's pass, each as a share of that request's part of a plain step; the priors until
        measured."""
        if self.fitted is None:
            return VERIFY_COST, self.draft_prior
        fixed, per_position, drafter = self.fitted
        plain = fixed + per_position * max(batch, 1)
        verify = per_position * max(batch, 1) / plain
        return verify, (self.draft_prior if drafter != drafter else drafter / plain)  # nan: not measured yet


def prior_draft_cost(method: str) -> float:
    """The drafter's pass, as a share of a plain step, before this machine has measured it: by speculative
    ``method`` (serve.Drafter.method)."""
    return PRIOR_DRAFT_COSTS.get(method, DRAFT_COST)
