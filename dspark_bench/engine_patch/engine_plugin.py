"""DSpark inside vLLM's engine process: counts the tokens the request's grammar forced.

Loaded through vLLM's ``vllm.general_plugins`` entry point by every vLLM process; it does nothing
unless ``dspark-serve`` started the server with DSpark on (``DSPARK_STATUS`` and ``DSPARK_STATE_DIR``
in the environment), so stock vLLM servers on the same installation are untouched.

A token is *grammar-forced* when the grammar admitted exactly one token at its position: the bitmask
row vLLM built for that position has a single bit set. The rows are built before the step (one per
draft position plus the bonus position); the tokens the step really kept are known only after
verification, so the flags of the built rows are held per request until ``accept_tokens`` says how
many positions were kept. The counts live in a small memory-mapped file per engine process that the
API server's middleware reads for ``/metrics`` and ``/dspark/status`` (dspark_bench.engine_patch.middleware).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np

from dspark_bench.engine_patch.state import COUNTER_GLOB, STATE_DIR_ENV, STATUS_ENV

FORCED, CONSTRAINED = 0, 1  # slots of the counters file: grammar-forced tokens, tokens under a grammar

logger = logging.getLogger("dspark")


def single_token_rows(bitmask: np.ndarray) -> np.ndarray:
    """For each row of an xgrammar token bitmask (int32 words, bit i of word w = token 32*w+i allowed),
    whether exactly one token is allowed."""
    words = np.ascontiguousarray(bitmask).view(np.uint32)
    nonzero = words != 0
    one_word = nonzero.sum(axis=1) == 1
    power_of_two = ((words & (words - np.uint32(1))) == 0) & nonzero  # exactly one bit in that word
    return one_word & power_of_two.any(axis=1)


def read_counters(state_dir: str | os.PathLike) -> dict[str, int]:
    """Grammar-forced and constrained token totals over every engine process of one server."""
    totals = np.zeros(2, dtype=np.int64)
    for path in Path(state_dir).glob(COUNTER_GLOB):
        values = np.fromfile(path, dtype=np.int64)
        if values.size >= 2:
            totals += values[:2]
    return {"grammar_forced_tokens": int(totals[FORCED]), "constrained_tokens": int(totals[CONSTRAINED])}


class GrammarForcedCounter:
    """Flags the positions of each step's bitmask, then counts the ones the step kept."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._counters: np.ndarray | None = None  # int64 [FORCED, CONSTRAINED], memory-mapped on first use
        self.pending: dict[str, np.ndarray] = {}

    @property
    def counters(self) -> np.ndarray:
        if self._counters is None:  # only the engine process ever counts: no empty files from the others
            self._counters = np.memmap(self.path, dtype=np.int64, mode="w+", shape=(2,))
        return self._counters

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
        self.counters[FORCED] += int(flags[:kept].sum())
        self.counters[CONSTRAINED] += min(kept, len(flags))


def _install(counter: GrammarForcedCounter) -> None:
    from vllm.v1.structured_output import StructuredOutputManager

    if getattr(StructuredOutputManager.grammar_bitmask, "_dspark", False):
        return
    grammar_bitmask, accept_tokens = StructuredOutputManager.grammar_bitmask, StructuredOutputManager.accept_tokens
    broken = False

    def guarded(action) -> None:
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


def register() -> None:
    """vLLM calls this in each of its processes; only the engine process builds grammar bitmasks."""
    state_dir = os.environ.get(STATE_DIR_ENV)
    facts = json.loads(os.environ.get(STATUS_ENV) or "{}")
    if not facts.get("enabled") or not state_dir or not Path(state_dir).is_dir():
        return
    _install(GrammarForcedCounter(Path(state_dir) / COUNTER_GLOB.replace("*", str(os.getpid()))))
