"""vLLM's DFlash drafter (``vllm/v1/spec_decode/dflash.py``, ``vllm/model_executor/models/qwen3_dflash.py``):
the methods DSpark wraps, in the worker process."""

from __future__ import annotations

from collections.abc import Sequence

from dspark_serve.hooks import Hook, chain

REPLACES = (
    "vllm.v1.spec_decode.dflash:DFlashProposer.propose",
    "vllm.v1.spec_decode.dflash:DFlashProposer._greedy_sample",
    "vllm.model_executor.models.qwen3_dflash:DFlashQwen3Model._normalize_context_k",
)


def install(*, propose: Sequence[Hook] = (), greedy_sample: Sequence[Hook] = (), normalize_context_k: Sequence[Hook] = ()) -> None:
    from vllm.model_executor.models.qwen3_dflash import DFlashQwen3Model
    from vllm.v1.spec_decode.dflash import DFlashProposer

    chain(DFlashProposer, "propose", propose)
    chain(DFlashProposer, "_greedy_sample", greedy_sample)
    chain(DFlashQwen3Model, "_normalize_context_k", normalize_context_k)
