"""vLLM's ``EngineCore`` (``vllm/v1/engine/core.py``): the method DSpark wraps."""

from __future__ import annotations

from collections.abc import Sequence

from dspark_serve.hooks import Hook, chain

REPLACES = ("vllm.v1.engine.core:EngineCore.post_step",)


def install(*, post_step: Sequence[Hook] = ()) -> None:
    """``post_step(model_executed)``: after each step, on both scheduling paths (``EngineCore.step`` and
    ``step_with_batch_queue``); on the synchronous one vLLM asks the worker for the step's drafts there."""
    from vllm.v1.engine.core import EngineCore

    chain(EngineCore, "post_step", post_step)
