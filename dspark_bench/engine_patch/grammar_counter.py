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

from dspark_bench.engine_patch.state import EngineCounters

REPLACES = (
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
    """Flags the positions of each step's bitmask, then counts the ones the step kept."""

    def __init__(self, counters: EngineCounters) -> None:
        self.counters = counters
        self.pending: dict[str, np.ndarray] = {}

    def built(self, bitmask: np.ndarray | None, request_ids: list[str], spec_tokens: dict[str, list[int]]) -> None:
        if bitmask is None:
            return
        flags = single_token_rows(bitmask)
        # Only this step's rows can match the next accept; older ones (aborted requests) are dropped.
        self.pending = {}
        row = 0
        for request_id in request_ids:
            rows = len(spec_tokens.get(request_id, ())) + 1  # each draft position, then the bonus one
            self.pending[request_id] = flags[row : row + rows]
            row += rows

    def accepted(self, request_id: str, kept: int) -> None:
        flags = self.pending.pop(request_id, None)
        if flags is None or kept <= 0:
            return
        self.counters.add("grammar_forced_tokens", int(flags[:kept].sum()))
        self.counters.add("constrained_tokens", min(kept, len(flags)))


def install(counter: GrammarForcedCounter) -> None:
    from vllm.v1.structured_output import StructuredOutputManager

    if getattr(StructuredOutputManager.grammar_bitmask, "_dspark", False):
        return
    grammar_bitmask, accept_tokens = StructuredOutputManager.grammar_bitmask, StructuredOutputManager.accept_tokens
    broken = False

    def guarded(action: Callable[[], None]) -> None:
        nonlocal broken
        if broken:
            return
        try:
            action()
        except Exception as exc:  # counting must never stop the engine
            broken = True
            logger.warning("DSpark: grammar-forced token counting stopped: %r", exc)

    def counted_bitmask(self, requests, structured_output_request_ids, scheduled_spec_decode_tokens):
        bitmask = grammar_bitmask(self, requests, structured_output_request_ids, scheduled_spec_decode_tokens)
        guarded(lambda: counter.built(bitmask, structured_output_request_ids, scheduled_spec_decode_tokens))
        return bitmask

    def counted_accept(self, request, new_token_ids):
        if request.use_structured_output and new_token_ids:
            guarded(lambda: counter.accepted(request.request_id, len(new_token_ids)))
        return accept_tokens(self, request, new_token_ids)

    counted_bitmask._dspark = True  # type: ignore[attr-defined]
    StructuredOutputManager.grammar_bitmask = counted_bitmask
    StructuredOutputManager.accept_tokens = counted_accept
