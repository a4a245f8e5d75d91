"""What the launcher, the engine plugin and the API middleware share: environment names, the state
folder's files, the engine's counters, and the one definition of mean acceptance length."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from dspark_serve.hooks import method_counter
from dspark_serve.targets import TARGETS

STATUS_ENV = "DSPARK_STATUS"  # JSON of what dspark-serve switched on and why (its status line, as data)
STATE_DIR_ENV = "DSPARK_STATE_DIR"  # folder the engine process and the API server share while serving
# the cap under asynchronous scheduling (speculation_gate: SpeculationGate.uniform)
ASYNC_CAP_HOW = "every request of a step drafts, or none, by the batch's measured acceptance (per request with uniform_drafts off)"
SCHEMA_STATE_FILE = "schemas.json"  # written by the launcher's schema precompile thread
COUNTER_GLOB = "engine-*.counters"  # one memory-mapped counters file per engine process
# SchedulerOutput attribute (engine core -> worker): the requests whose context the drafter keeps (None: all)
CONTEXT_IDS = "dspark_context_ids"
# Request attribute (engine core): which engine-core source made the drafts scheduled for its next step
# ("repeat", "grammar"), None where they are the learned drafter's (engine_drafts)
ENGINE_DRAFTED = "dspark_engine_drafted"

# The counters file's int64 slots, in order. Tokens: kept under a grammar, and of those the ones the
# grammar forced (one allowed token). Steps: engine steps that ran the model, those after which the
# drafter ran, and of those the probes (no request asked for drafts: speculation_gate); steps the worker ran
# as stock vLLM's, the drafter having nothing to do after them (no_draft_step). Drafts made from
# the grammar's forced text (grammar_drafts), then from the request's own repeated text (repeat_drafts):
# verified, and of those landed. Then what a step costs on this
# machine as the gate measured it (microseconds: fixed, per scheduled position, drafter pass), and what
# those costs choose: the largest batch at which a request with the server's recent acceptance drafts.
# Then steps whose drafts came back with the step's output, and those the engine core asked the worker
# for in a round trip of their own (draft_handoff). Last, steps scheduled asynchronously, where the
# acceptance cap cuts placeholders instead of drafts (speculation_gate). Then steps the governor ran with
# speculation off because it measured plain steps faster, and its switches between the two (governor).
# Then the forced tokens sent to the worker's drafts under asynchronous scheduling (async_grammar_drafts), and
# the structure memory's predictions sent there (structure_lookahead). Last, the time DSpark's own hooks took in
# the engine core and in the worker, in microseconds (hooks.CLOCK), then the same per method DSpark wraps.
# Every vLLM method DSpark wraps, as "Class.method" (the same name on two runners shares one slot: one runs)
HOOKED_METHODS = tuple(dict.fromkeys(key.split(":", 1)[1] for target in TARGETS for key in target.REPLACES))
COUNTERS = (
    "grammar_forced_tokens",
    "constrained_tokens",
    "engine_steps",
    "drafter_steps",
    "probe_steps",
    "stock_steps",
    "grammar_draft_tokens",
    "grammar_drafts_accepted",
    "repeat_draft_tokens",
    "repeat_drafts_accepted",
    "step_fixed_us",
    "step_per_position_us",
    "drafter_pass_us",
    "drafts_pay_to_batch",
    "carried_draft_steps",
    "fetched_draft_steps",
    "async_steps",
    "plain_steps",
    "governor_switches",
    "async_forced_tokens",
    "async_structure_tokens",
    "engine_hook_us",
    "worker_hook_us",
    *(method_counter(method) for method in HOOKED_METHODS),
)
SLOTS = {name: slot for slot, name in enumerate(COUNTERS)}  # the engine core adds to several a step: no list search
MEASURES = ("step_fixed_us", "step_per_position_us", "drafter_pass_us", "drafts_pay_to_batch")  # set, not summed: the largest over processes


class EngineCounters:
    """This engine process's counters, memory-mapped so the API server can read them while serving."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._values: np.ndarray | None = None

    @property
    def values(self) -> np.ndarray:
        if self._values is None:  # only the engine process ever counts: no empty files from the others
            self._values = np.memmap(self.path, dtype=np.int64, mode="w+", shape=(len(COUNTERS),))
        return self._values

    def add(self, name: str, amount: int = 1) -> None:
        self.values[SLOTS[name]] += amount

    def set(self, name: str, value: int) -> None:
        self.values[SLOTS[name]] = value


def engine_counters(state_dir: str | os.PathLike) -> EngineCounters:
    return EngineCounters(Path(state_dir) / COUNTER_GLOB.replace("*", str(os.getpid())))


def read_counters(state_dir: str | os.PathLike) -> dict[str, int]:
    """Every counter summed over the engine processes of one server (0 where none has counted)."""
    totals = np.zeros(len(COUNTERS), dtype=np.int64)
    measured = np.array([name in MEASURES for name in COUNTERS])
    for path in Path(state_dir).glob(COUNTER_GLOB):
        values = np.zeros(len(COUNTERS), dtype=np.int64)
        found = np.fromfile(path, dtype=np.int64)[: len(COUNTERS)]
        values[: found.size] = found
        totals = np.where(measured, np.maximum(totals, values), totals + values)
    return {name: int(value) for name, value in zip(COUNTERS, totals, strict=True)}


def mean_acceptance_length(drafts: float, accepted_tokens: float) -> float | None:
    """vLLM's definition: 1 (the token every verification step yields) + accepted draft tokens per draft."""
    return 1.0 + accepted_tokens / drafts if drafts else None
