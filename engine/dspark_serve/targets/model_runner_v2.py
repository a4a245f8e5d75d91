"""vLLM's V2 ``GPUModelRunner`` (``vllm/v1/worker/gpu/model_runner.py``), the runner a GPU uses for the
speculative methods that keep asynchronous scheduling (``ngram_gpu``, ``dflash``): the method DSpark wraps,
in the worker process. Importing it needs no GPU."""

from __future__ import annotations

from collections.abc import Sequence

from dspark_serve.hooks import Hook, chain

REPLACES = ("vllm.v1.worker.gpu.model_runner:GPUModelRunner.sample_tokens",)


def install(*, sample_tokens: Sequence[Hook] = ()) -> None:
    """``sample_tokens(grammar_output)``: samples the step, then runs the speculator's ``propose``."""
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    chain(GPUModelRunner, "sample_tokens", sample_tokens)
