"""vLLM's ``StructuredOutputManager`` (``vllm/v1/structured_output/__init__.py``): the method DSpark wraps."""

from __future__ import annotations

from collections.abc import Sequence

from dspark_serve.hooks import Hook, chain

REPLACES = ("vllm.v1.structured_output:StructuredOutputManager.grammar_bitmask",)


def install(*, grammar_bitmask: Sequence[Hook] = ()) -> None:
    """Once a step: a hook here costs a step, not a request (``accept_tokens``, called per request, is not wrapped)."""
    from vllm.v1.structured_output import StructuredOutputManager

    chain(StructuredOutputManager, "grammar_bitmask", grammar_bitmask)
