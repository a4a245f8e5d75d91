"""Counts the tokens each request's grammar forced, inside vLLM's engine core.

A token is *grammar-forced* when the grammar admitted exactly one token at its position: the bitmask
row vLLM built for that position has a single bit set. The rows are built before the step (one per
draft position plus the bonus position); the tokens the step really kept are known only after
verification, so the flags of the built rows are held until the step's output is taken in
(``Scheduler.update_from_output``: each request's new tokens, the ones its grammar accepted). The counts go to
the engine's counters file (``state.EngineCounters``), which the API server's middleware reads for
``/metrics`` and ``/dspark/status``.

Both hooks run once a step, not once a request: under asynchronous scheduling a structured step's sampling
waits for the engine core to take the step before in and build the bitmask, so their time is the GPU's too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from dspark_serve.state import EngineCounters

HOOKED = (  # the vLLM methods its hooks run on (targets/ installs them)
    "vllm.v1.structured_output:StructuredOutputManager.grammar_bitmask",
    "vllm.v1.core.sched.scheduler:Scheduler.update_from_output",
)
READS = ("vllm.v1.engine:EngineCoreOutput.new_token_ids",)  # what update_from_output returns per request
# Bitmask words a step's flags may read: a larger bitmask (a large vocabulary, a wide batch, drafts) is read at
# one step in N, its forced tokens counted N times, so that reading costs a step at most about this many words
# (an 8B model's 128k-token vocabulary at 64 requests verifying 5 drafts: 1.5M words, 1.5 ms a step on a 2-core EPYC).
COUNT_WORDS = 1 << 16


logger = logging.getLogger("dspark")


def single_token_rows(bitmask: np.ndarray) -> np.ndarray:
    """For each row of an xgrammar token bitmask (int32 words, bit i of word w = token 32*w+i allowed),
    whether exactly one token is allowed: the row's bits sum to one."""
    words = np.ascontiguousarray(bitmask)
    if not hasattr(np, "bitwise_count"):  # numpy < 2: one set word, holding a power of two
        words = words.view(np.uint32)
        nonzero = words != 0
        return (nonzero.sum(axis=-1) == 1) & (((words & (words - np.uint32(1))) == 0) & nonzero).any(axis=-1)
    words = words.view(np.uint64) if words.shape[-1] % 2 == 0 else words.view(np.uint32)  # half the words to count
    return np.bitwise_count(words).sum(axis=-1, dtype=np.int32) == 1


class GrammarForcedCounter:
    """Flags the positions of each step's bitmask (``built``), then counts the ones the step kept (``taken_in``),
    each once a step: per request, a dict lookup; the rest in numpy."""

    def __init__(self, counters: EngineCounters, budget_words: int = COUNT_WORDS) -> None:
        self.counters = counters
        self.budget_words = budget_words
        self.place: dict[str, int] = {}  # request -> its place in this step's bitmask
        self._first = np.zeros(0, dtype=np.int64)  # per place: its first row, and its rows
        self._rows = np.zeros(0, dtype=np.int64)
        self._last = 0
        self._forced_before: np.ndarray | None = None  # forced rows before each row; None: this step is not read
        self._weight = 1  # the steps a read step's forced tokens stand for
        self._unread = 0  # steps since the last one read

    def built(self, bitmask: np.ndarray | None, request_ids: Sequence[str], spec_tokens: dict[str, list[int]]) -> None:
        if bitmask is None:
            return
        # Only this step's rows can match the next output; older ones (aborted requests) are dropped.
        self.place = {request_id: place for place, request_id in enumerate(request_ids)}
        if spec_tokens:  # each draft position, then the bonus one
            self._rows = np.fromiter((len(spec_tokens.get(r, ())) + 1 for r in request_ids), dtype=np.int64, count=len(request_ids))
        else:
            self._rows = np.ones(len(request_ids), dtype=np.int64)
        self._first = np.cumsum(self._rows) - self._rows
        self._last = len(bitmask)  # rows past the bitmask's end count as none
        every = max(1, -(-bitmask.size // self.budget_words))
        self._unread += 1
        if self._unread >= every:
            self._unread, self._weight = 0, every
            self._forced_before = np.concatenate(([0], np.cumsum(single_token_rows(bitmask))))
        else:
            self._forced_before = None

    def taken_in(self, kept: Iterable[tuple[str, int]]) -> None:
        """The step's output: (request, tokens its grammar accepted) for each request that wrote some."""
        place = self.place
        if not place:
            return
        found = [(place.pop(request_id), tokens) for request_id, tokens in kept if request_id in place]
        self.place = {}
        if not found:
            return
        places, tokens = np.array(found, dtype=np.int64).T
        start = np.minimum(self._first[places], self._last)
        stop = np.minimum(self._first[places] + np.minimum(tokens, self._rows[places]), self._last)
        self.counters.add("constrained_tokens", int((stop - start).sum()))
        if (before := self._forced_before) is not None:
            forced = before[stop] - before[start]
            if total := int(forced.sum()) * self._weight:
                self.counters.add("grammar_forced_tokens", total)


class CountingHooks:
    """The counter's hooks on ``StructuredOutputManager.grammar_bitmask`` (``targets.structured_output``) and
    ``Scheduler.update_from_output`` (``targets.scheduler``). Counting must never stop the engine: the first
    error turns it off, with one warning."""

    def __init__(self, counter: GrammarForcedCounter) -> None:
        self.counter = counter
        self.broken = False

    def _guarded(self, action: Callable[[], None]) -> None:
        if self.broken:
            return
        try:
            action()
        except Exception as exc:  # noqa: BLE001
            self.broken = True
            logger.warning("DSpark: grammar-forced token counting stopped: %r", exc)

    def grammar_bitmask(self, proceed, manager, requests, structured_output_request_ids, scheduled_spec_decode_tokens):
        bitmask = proceed(requests, structured_output_request_ids, scheduled_spec_decode_tokens)
        self._guarded(lambda: self.counter.built(bitmask, structured_output_request_ids, scheduled_spec_decode_tokens))
        return bitmask

    def update_from_output(self, proceed, scheduler, scheduler_output, model_runner_output):
        outputs = proceed(scheduler_output, model_runner_output)
        if self.counter.place:  # the step had structured requests
            self._guarded(
                lambda: self.counter.taken_in(
                    (output.request_id, len(output.new_token_ids)) for each in outputs.values() for output in each.outputs if output.new_token_ids
                )
            )
        return outputs
