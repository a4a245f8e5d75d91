"""vLLM's ``StructuredOutputManager`` (``vllm/v1/structured_output/__init__.py``): the methods DSpark wraps."""

from __future__ import annotations

from collections.abc import Sequence

from dspark_serve.hooks import Hook, chain

REPLACES = (
    "vllm.v1.structured_output:StructuredOutputManager.grammar_bitmask",
    "vllm.v1.structured_output:StructuredOutputManager.accept_tokens",
)


def install(*, grammar_bitmask: Sequence[Hook] = (), accept_tokens: Sequence[Hook] = ()) -> None:
    from vllm.v1.structured_output import StructuredOutputManager

    chain(StructuredOutputManager, "grammar_bitmask", grammar_bitmask)
    chain(StructuredOutputManager, "accept_tokens", accept_tokens)
