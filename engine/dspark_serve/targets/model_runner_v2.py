"""vLLM's V2 ``GPUModelRunner`` (``vllm/v1/worker/gpu/model_runner.py``), the runner a GPU uses for the
speculative methods that keep asynchronous scheduling (``ngram_gpu``, ``dflash``), and its CUDA graph manager
(``vllm/v1/worker/gpu/cudagraph_utils.py``): the methods DSpark wraps, in the worker process. Importing them
needs no GPU."""

from __future__ import annotations

from collections.abc import Sequence

from dspark_serve.hooks import Hook, chain

REPLACES = (
    "vllm.v1.worker.gpu.model_runner:GPUModelRunner.sample_tokens",
    "vllm.v1.worker.gpu.cudagraph_utils:ModelCudaGraphManager._init_candidates",
)


def install(*, sample_tokens: Sequence[Hook] = (), init_candidates: Sequence[Hook] = ()) -> None:
    """``sample_tokens(grammar_output)``: samples the step, then runs the speculator's ``propose``.
    ``_init_candidates()``: the target model's graph manager maps each token count to its captured graphs."""
    from vllm.v1.worker.gpu.cudagraph_utils import ModelCudaGraphManager
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    chain(GPUModelRunner, "sample_tokens", sample_tokens)
    chain(ModelCudaGraphManager, "_init_candidates", init_candidates)
