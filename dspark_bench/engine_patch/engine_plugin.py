"""DSpark inside vLLM's engine processes: counts the tokens the request's grammar forced, verifies
only the drafts each request's own acceptance pays for (``acceptance``), and makes vLLM 0.32's
one-pass (dflash) drafters exact on the CPU.

Loaded through vLLM's ``vllm.general_plugins`` entry point by every vLLM process; it does nothing
unless ``dspark-serve`` started the server with DSpark on (``DSPARK_STATUS`` and ``DSPARK_STATE_DIR``
in the environment), so stock vLLM servers on the same installation are untouched.

The dflash fix: a DFlash drafter projects the target's hidden states into every draft layer's keys at
once and K-normalises them with one grouped call, each layer by its own weight. On the CPU build that
call applies the first layer's weight to every layer, so any drafter of two or more layers attends
to mis-scaled context keys and its drafts miss (2-layer drafter for the embedded model: 3.9 accepted
per step instead of 10.9; ``tests/unit/test_engine_plugin.py``). ``_fix_dflash_context_k_norm``
normalises layer by layer instead. Verification is untouched either way: only draft quality changes.

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

ACCEPTANCE_CAP_ENV = "DSPARK_ACCEPTANCE_CAP"  # "0": verify every draft the load allows, whatever lands
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


def record_step(history: dict, scheduled_drafts: dict, index_of: dict, sampled: list) -> None:
    """Add one verification step's outcome per request to ``history`` (request id -> Acceptance)."""
    from dspark_bench.engine_patch.acceptance import Acceptance

    for request_id, drafts in scheduled_drafts.items():
        index = index_of.get(request_id)
        if index is None or index >= len(sampled):
            continue
        drafted = sum(1 for token in drafts if token >= 0)  # -1: a draft the grammar refused
        history.setdefault(request_id, Acceptance()).record(drafted, max(len(sampled[index]) - 1, 0))


def cap_drafts(history: dict, requests: dict, request_ids) -> None:
    """Cut each request's new drafts to what its recent acceptance pays for (acceptance.draft_budget)."""
    from dspark_bench.engine_patch.acceptance import draft_budget

    for request_id in request_ids:
        request = requests.get(request_id)
        if request is None or not request.spec_token_ids or request_id not in history:
            continue
        keep = draft_budget(history[request_id].rate, len(request.spec_token_ids))
        if keep < len(request.spec_token_ids):
            request.spec_token_ids = request.spec_token_ids[:keep]


def _install_acceptance_cap() -> None:
    """``cap_drafts`` in vLLM's scheduler, after the grammar checked the drafts and before they are
    scheduled for verification; ``record_step`` on every step's output."""
    from vllm.v1.core.sched.scheduler import Scheduler

    if getattr(Scheduler.update_draft_token_ids, "_dspark", False):
        return
    update_from_output, update_draft_token_ids = Scheduler.update_from_output, Scheduler.update_draft_token_ids
    history: dict = {}

    def recorded(self, scheduler_output, model_runner_output):
        sampled = model_runner_output.sampled_token_ids or []
        record_step(history, scheduler_output.scheduled_spec_decode_tokens, model_runner_output.req_id_to_index, sampled)
        outputs = update_from_output(self, scheduler_output, model_runner_output)
        for request_id in [r for r in history if r not in self.requests]:
            del history[request_id]
        return outputs

    def capped(self, draft_token_ids):
        update_draft_token_ids(self, draft_token_ids)
        cap_drafts(history, self.requests, draft_token_ids.req_ids)

    capped._dspark = True  # type: ignore[attr-defined]
    Scheduler.update_from_output = recorded
    Scheduler.update_draft_token_ids = capped


def normalize_per_layer(rms_norm, keys, weights, eps: float):
    """Keys [layers, tokens, heads, head_dim], each layer RMS-normalised by its own row of ``weights``."""
    import torch

    normed = torch.empty_like(keys)
    for layer in range(keys.shape[0]):
        rms_norm(normed[layer], keys[layer], weights[layer], eps)
    return normed


def _fix_dflash_context_k_norm() -> None:
    from vllm import _custom_ops as ops
    from vllm.model_executor.models.qwen3_dflash import DFlashQwen3Model
    from vllm.platforms import current_platform

    if not current_platform.is_cpu() or getattr(DFlashQwen3Model._normalize_context_k, "_dspark", False):
        return

    def per_layer(self, all_k):
        return normalize_per_layer(ops.rms_norm, all_k, self._k_norm_weights, self._rms_norm_eps)

    per_layer._dspark = True  # type: ignore[attr-defined]
    DFlashQwen3Model._normalize_context_k = per_layer


def register() -> None:
    """vLLM calls this in each of its processes; only the engine process builds grammar bitmasks, only
    the worker runs drafters."""
    state_dir = os.environ.get(STATE_DIR_ENV)
    facts = json.loads(os.environ.get(STATUS_ENV) or "{}")
    if not facts.get("enabled") or not state_dir or not Path(state_dir).is_dir():
        return
    if facts.get("drafter") == "dflash":
        _fix_dflash_context_k_norm()
    if os.environ.get(ACCEPTANCE_CAP_ENV, "1") != "0":
        _install_acceptance_cap()
    _install(GrammarForcedCounter(Path(state_dir) / COUNTER_GLOB.replace("*", str(os.getpid()))))
