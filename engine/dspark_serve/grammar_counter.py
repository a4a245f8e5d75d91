"""Counts the tokens each request's grammar forced, inside vLLM's structured-output manager.

A token is *grammar-forced* when the grammar admitted exactly one token at its position: the bitmask
row vLLM built for that position has a single bit set. The rows are built before the step (one per
draft position plus the bonus position); the tokens the step really kept are known only after
verification, so the flags of the built rows are held per request until ``accept_tokens`` says how
many positions were kept. The counts go to the engine's counters file (``state.EngineCounters``),
which the API server's middleware reads for ``/metrics`` and ``/dspark/status``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from dspark_serve.state import EngineCounters

HOOKED = (  # the vLLM methods its hooks run on (targets/ installs them)
    "vllm.v1.structured_output:StructuredOutputManager.grammar_bitmask",
    "vllm.v1.structured_output:StructuredOutputManager.accept_tokens",
)

logger = logging.getLogger("dspark")


def single_token_rows(bitmask: np.ndarray) -> np.ndarray:
    """For each row of an xgrammar token bitmask (int32 words, bit i of word w = token 32*w+i allowed),
    whether exactly one token is allowed."""
    words = np.ascontiguousarray(bitmask).view(np.uint32)
    nonzero = words != 0
    one_word = nonzero.sum(axis=1) == 1
    power_of_two = ((words & (words - np.uint32(1))) == 0) & nonzero  # exactly one bit in that word
    return one_word & power_of_two.any(axis=1)


class GrammarForcedCounter:
    """Flags the positions of each step's bitmask, then counts the ones the step kept. The engine core runs
    this every step for every constrained request, so a request's count is two list reads (a running sum of
    the step's flags) and the step's totals reach the counters once, when its last request is counted (or
    at the next step's bitmask): at 64 requests that took a step 169 us with a numpy sum and two counter
    writes per request, on the 2-core Xeon."""

    def __init__(self, counters: EngineCounters) -> None:
        self.counters = counters
        self.pending: dict[str, tuple[int, int]] = {}  # request -> (its first row, its rows) in this step's bitmask
        self._forced_before: list[int] = [0]  # forced rows before each row of this step's bitmask
        self._forced = 0  # this step's counts, not yet in the counters
        self._constrained = 0

    def built(self, bitmask: np.ndarray | None, request_ids: list[str], spec_tokens: dict[str, list[int]]) -> None:
        if bitmask is None:
            return
        self._flush()  # a request of the last step that was never counted (aborted) holds no count back
        self._forced_before = [0, *np.cumsum(single_token_rows(bitmask)).tolist()]
        # Only this step's rows can match the next accept; older ones (aborted requests) are dropped.
        self.pending = {}
        row = 0
        for request_id in request_ids:
            rows = len(spec_tokens.get(request_id, ())) + 1  # each draft position, then the bonus one
            self.pending[request_id] = (row, rows)
            row += rows

    def accepted(self, request_id: str, kept: int) -> None:
        found = self.pending.pop(request_id, None)
        if found is not None and kept > 0:
            first, rows = found
            last = len(self._forced_before) - 1  # rows past the bitmask's end count as none
            start, stop = min(first, last), min(first + min(kept, rows), last)
            self._forced += self._forced_before[stop] - self._forced_before[start]
            self._constrained += stop - start
        if not self.pending:
            self._flush()

    def _flush(self) -> None:
        if self._forced:
            self.counters.add("grammar_forced_tokens", self._forced)
        if self._constrained:
            self.counters.add("constrained_tokens", self._constrained)
        self._forced = self._constrained = 0


class CountingHooks:
    """The counter's hooks on ``StructuredOutputManager`` (``targets.structured_output``). Counting must
    never stop the engine: the first error turns it off, with one warning."""

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

    def accept_tokens(self, proceed, manager, request, new_token_ids):
        if request.use_structured_output and new_token_ids:
            self._guarded(lambda: self.counter.accepted(request.request_id, len(new_token_ids)))
        return proceed(request, new_token_ids)
