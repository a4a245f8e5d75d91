"""vLLM 0.32's one-pass (dflash) drafter on the CPU: exact context keys, and no pass when nothing is drafted.

- K-norm: a DFlash drafter projects the target's hidden states into every draft layer's keys at once
  and K-normalises them with one grouped call, each layer by its own weight. On the CPU build that
  call applies the first layer's weight to every layer, so any drafter of two or more layers attends
  to mis-scaled context keys and its drafts miss (2-layer drafter for the embedded model: 3.9 accepted
  per step instead of 10.9). ``normalize_per_layer`` normalises layer by layer instead. Verification
  is untouched either way: only draft quality changes.
- Context only at 0 drafts: when a step asks for no drafts (``speculation_gate``, or vLLM's own
  load-aware length), vLLM still runs the drafter's whole forward pass "to keep the drafter KV cache
  in sync". A DFlash drafter's cache holds only the target's context, which is written before that
  forward (``precompute_and_store_context_kv``); its query slots are rewritten by the next step's
  context. So at 0 drafts only the context is stored, and the forward, the LM head and the sampling
  are skipped; drafts made later still see every earlier position.
"""

from __future__ import annotations

import inspect
from typing import Any

REPLACES = (
    "vllm.model_executor.models.qwen3_dflash:DFlashQwen3Model._normalize_context_k",
    "vllm.v1.spec_decode.dflash:DFlashProposer.propose",
)
READS = (
    "vllm.v1.spec_decode.dflash:DFlashProposer.set_inputs_first_pass",
    "vllm.v1.spec_decode.dflash:DFlashProposer.build_model_inputs_first_pass",
)


def normalize_per_layer(rms_norm, keys, weights, eps: float):
    """Keys [layers, tokens, heads, head_dim], each layer RMS-normalised by its own row of ``weights``."""
    import torch

    normed = torch.empty_like(keys)
    for layer in range(keys.shape[0]):
        rms_norm(normed[layer], keys[layer], weights[layer], eps)
    return normed


def fix_context_k_norm() -> None:
    from vllm import _custom_ops as ops
    from vllm.model_executor.models.qwen3_dflash import DFlashQwen3Model
    from vllm.platforms import current_platform

    if not current_platform.is_cpu() or getattr(DFlashQwen3Model._normalize_context_k, "_dspark", False):
        return

    def per_layer(self, all_k):
        return normalize_per_layer(ops.rms_norm, all_k, self._k_norm_weights, self._rms_norm_eps)

    per_layer._dspark = True  # type: ignore[attr-defined]
    DFlashQwen3Model._normalize_context_k = per_layer


def store_context_only(proposer: Any, arguments: dict[str, Any]):
    """What DFlash's ``propose`` does before its forward pass, and nothing after: the context's keys and
    values go to the drafter's cache; no drafts (an empty [batch, 0] tensor)."""
    import torch

    cad = arguments["common_attn_metadata"]
    proposer.num_speculative_tokens = 0
    hidden = proposer.model.combine_hidden_states(arguments["target_hidden_states"])
    num_tokens, _, _ = proposer.set_inputs_first_pass(
        target_token_ids=arguments["target_token_ids"],
        next_token_ids=arguments["next_token_ids"],
        target_positions=arguments["target_positions"],
        target_hidden_states=hidden,
        token_indices_to_sample=arguments.get("token_indices_to_sample"),
        cad=cad,
        num_rejected_tokens_gpu=arguments.get("num_rejected_tokens_gpu"),
    )
    proposer.build_model_inputs_first_pass(num_tokens, num_tokens, None)  # stores the context, builds nothing we use
    return torch.empty(cad.batch_size(), 0, device=hidden.device, dtype=torch.int64)


def skip_forward_at_zero_drafts() -> None:
    from vllm.v1.spec_decode.dflash import DFlashProposer

    if getattr(DFlashProposer.propose, "_dspark", False):
        return
    propose = DFlashProposer.propose
    signature = inspect.signature(propose)

    def context_only_at_zero(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        if bound.arguments.get("num_speculative_tokens") == 0 and not bound.arguments.get("mm_embed_inputs"):
            return store_context_only(self, bound.arguments)
        return propose(self, *args, **kwargs)

    context_only_at_zero._dspark = True  # type: ignore[attr-defined]
    DFlashProposer.propose = context_only_at_zero


def install() -> None:
    fix_context_k_norm()
    skip_forward_at_zero_drafts()
