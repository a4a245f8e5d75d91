"""vLLM's ``GPUModelRunner`` (``vllm/v1/worker/gpu_model_runner.py``; the CPU's runner is a subclass): the
methods DSpark wraps, in the worker process."""

from __future__ import annotations

from collections.abc import Sequence

from dspark_serve.hooks import Hook, chain

REPLACES = (
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner._sample",
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner._prepare_inputs",
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner.execute_model",
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner.sample_tokens",
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner.propose_draft_token_ids",
)


def install(
    *,
    sample: Sequence[Hook] = (),
    prepare_inputs: Sequence[Hook] = (),
    execute_model: Sequence[Hook] = (),
    sample_tokens: Sequence[Hook] = (),
    propose_draft_token_ids: Sequence[Hook] = (),
) -> None:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    chain(GPUModelRunner, "_sample", sample)
    chain(GPUModelRunner, "_prepare_inputs", prepare_inputs)
    chain(GPUModelRunner, "execute_model", execute_model)
    chain(GPUModelRunner, "sample_tokens", sample_tokens)
    chain(GPUModelRunner, "propose_draft_token_ids", propose_draft_token_ids)
