"""Each uniform decode step on a full CUDA graph of its own query length, under DSpark's dynamic draft length
(vLLM's V2 model runner, a GPU's). On while speculating; ``--no-dspark-full-graphs`` turns it off.

With a dynamic draft length (``num_speculative_tokens_per_batch_size``) vLLM 0.32's V2 runner captures a full
graph for each query length of the schedule (1 + k for each k, 1 included where the schedule reaches 0), then
maps each token count to the graphs of the smallest captured count at or above it
(``CudaGraphManager._init_candidates``), whatever their query length. So a smaller graph of another length
hides the one that fits: a step of 63 requests at 1 token each (a step that drafts nothing: the gate's plain
steps at 64 users) meets only 63-token graphs of 9 and 7 tokens a request, and runs piecewise graphs, where
stock vLLM pads it onto its 64-token full graph. On an H100 a piecewise step cost stock 15-36% of its
throughput (``benchmarks/gpu/h100-s55-fullgraph-probe``). In session 57's order_extraction run
(``h100-s57-lookahead``), vLLM's graph log counts 355 steps of 57-63 tokens that dspark-ngram without structure
drafts ran piecewise, padded to 64.

``widen`` gives each token count, after vLLM's own full graphs and before the piecewise ones, the smallest full
graph of each other query length that can hold it. A batch vLLM matched to a full graph still gets that graph
(it comes first); one it sent piecewise gets the padded full graph of its own query length, the one stock
vLLM runs such a step on. Only the choice of captured graph changes, once, at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

HOOKED = ("vllm.v1.worker.gpu.cudagraph_utils:ModelCudaGraphManager._init_candidates",)  # targets/ installs it
# Read, not replaced: the candidate lists it widens, and the descriptor fields it sorts them by.
READS = (
    "vllm.v1.worker.gpu.cudagraph_utils:CudaGraphManager._init_candidates",
    "vllm.v1.worker.gpu.cudagraph_utils:CudaGraphManager.dispatch",
    "vllm.v1.worker.gpu.cudagraph_utils:BatchExecutionDescriptor",
)

Key = tuple[int, int]  # (num_tokens, num_active_loras), vLLM's candidate key


def _full(desc: Any) -> bool:
    return getattr(desc.cg_mode, "name", "") == "FULL"


def widen(candidates: Mapping[Key, list[Any]]) -> dict[Key, list[Any]]:
    """vLLM's candidates per (token count, LoRA case), with the smallest full uniform-decode graph of each
    query length (and microbatch split) that holds the count added after vLLM's full graphs, before its
    piecewise ones. Pure: descriptors are compared, never built."""
    uniform = sorted(
        {desc for descs in candidates.values() for desc in descs if _full(desc) and desc.uniform_token_count is not None},
        key=lambda desc: (desc.num_tokens, desc.uniform_token_count, desc.num_ubatches),
    )
    widened: dict[Key, list[Any]] = {}
    for key, descs in candidates.items():
        num_tokens, loras = key
        split = next((i for i, desc in enumerate(descs) if not _full(desc)), len(descs))
        covered = {(desc.uniform_token_count, desc.num_ubatches) for desc in descs[:split]}
        extra = []
        for desc in uniform:
            shape = (desc.uniform_token_count, desc.num_ubatches)
            if desc.num_tokens >= num_tokens and desc.num_active_loras == loras and shape not in covered:
                covered.add(shape)
                extra.append(desc)
        widened[key] = [*descs[:split], *extra, *descs[split:]]
    return widened


class FullGraphHooks:
    """The worker's hook on vLLM's graph manager (the target model's; the speculator's are left alone)."""

    def init_candidates(self, proceed, manager, *args, **kwargs):
        result = proceed(*args, **kwargs)
        manager._candidates = widen(manager._candidates)
        return result
