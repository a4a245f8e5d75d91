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
- Only the context that may be drafted from: tokens of requests the speculation gate calls dormant
  (``CONTEXT_IDS``) are not stored at all.
- Context later, in one batch: a step after which the drafter does not run keeps the target's hidden
  states aside (``ContextBacklog``); the backlog is stored in one call before the drafter's next pass,
  or once it holds ``BACKLOG_TOKENS``: larger matrix products, and no work at all while the drafter is
  idle. Where a slot appears twice (its block freed and given to another request, or a position whose
  draft was rejected and is written again by the next step), the later write wins, as it would have
  step by step. A rejected draft's position is written again before any draft can read it: the
  drafter reads context only below the request's length.
- Under vLLM's asynchronous scheduling (a GPU's, for these drafters), a step after which nothing is drafted
  still hands the next step each request's last valid token, as vLLM does while drafting (``keep_next_tokens``).
- Drafts picked in float32: on the CPU, torch's argmax over bfloat16 logits takes five times as long as over
  float32 (96 rows of 3,308: 1.06 ms against 0.19 on the 2-core AVX-512 EPYC), 3% of a step at 8 users.
  float32 holds every bfloat16 value exactly, so the same token wins, ties included.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Collection, Sequence
from typing import Any

from dspark_serve.state import CONTEXT_IDS

HOOKED = (  # the vLLM methods its hooks run on (targets/ installs them)
    "vllm.model_executor.models.qwen3_dflash:DFlashQwen3Model._normalize_context_k",
    "vllm.v1.spec_decode.dflash:DFlashProposer.propose",
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner.propose_draft_token_ids",
    "vllm.v1.spec_decode.dflash:DFlashProposer._greedy_sample",
)
READS = (
    "vllm.v1.spec_decode.dflash:DFlashProposer.set_inputs_first_pass",
    "vllm.v1.spec_decode.dflash:DFlashProposer.build_model_inputs_first_pass",
    "vllm.model_executor.models.qwen3_dflash:DFlashQwen3ForCausalLM.combine_hidden_states",
    "vllm.model_executor.models.qwen3_dflash:DFlashQwen3ForCausalLM.precompute_and_store_context_kv",
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner._get_positions",
    "vllm.v1.attention.backend:CommonAttentionMetadata.slot_mapping",  # the step's slots, reused once checked
    "vllm.v1.spec_decode.llm_base_proposer:SpecDecodeBaseProposer.prepare_next_token_ids_padded",
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner._copy_valid_sampled_token_count",
)
logger = logging.getLogger("dspark")
BACKLOG_TOKENS = 2048  # context tokens kept aside before they are stored anyway (bounds memory)


def normalize_per_layer(rms_norm, keys, weights, eps: float):
    """Keys [layers, tokens, heads, head_dim], each layer RMS-normalised by its own row of ``weights``."""
    import torch

    normed = torch.empty_like(keys)
    for layer in range(keys.shape[0]):
        rms_norm(normed[layer], keys[layer], weights[layer], eps)
    return normed


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


def context_slots(block_table, query_start_loc, positions, block_size: int):
    """Each context token's KV-cache slot, as vLLM's DFlash input kernel computes it: its request's block
    for the position, times the block size, plus the offset in the block."""
    import torch

    query_lengths = query_start_loc[1:] - query_start_loc[:-1]
    request_of = torch.repeat_interleave(torch.arange(len(query_lengths), device=positions.device), query_lengths)
    blocks = torch.clamp(positions // block_size, max=block_table.shape[1] - 1)
    return block_table[request_of, blocks].to(torch.int64) * block_size + positions % block_size


class StepSlots:
    """A step's context slots: the slot mapping vLLM already computed for the step's tokens in the drafter's
    KV-cache group (``CommonAttentionMetadata.slot_mapping``), once it has been seen to equal DFlash's own
    formula (``context_slots``) on the first ``CHECKED`` steps; the formula wherever it did not, or where
    there is none. Computing them again was half the work of keeping a step's context (py-spy, 1 user)."""

    CHECKED = 8

    def __init__(self) -> None:
        self.agreed = 0  # steps on which the slot mapping equalled the formula
        self.differs = False

    def of(self, cad, positions, block_size: int):
        import torch

        mapping = getattr(cad, "slot_mapping", None)
        if self.differs or mapping is None or len(mapping) < len(positions):
            return context_slots(cad.block_table_tensor, cad.query_start_loc, positions, block_size)
        given = mapping[: len(positions)].to(torch.int64, copy=True)  # vLLM rewrites its buffer next step
        if self.agreed < self.CHECKED:
            formula = context_slots(cad.block_table_tensor, cad.query_start_loc, positions, block_size)
            if not torch.equal(given, formula):
                self.differs = True
                logger.info("DSpark: this model's slot mapping is not the drafter's; its context slots are computed")
                return formula
            self.agreed += 1
        return given


def request_tokens(query_start_loc, request_ids: Sequence[str], wanted: Collection[str]):
    """Mask of a step's tokens that belong to the ``wanted`` requests (``request_ids``: the batch's order)."""
    import torch

    query_lengths = query_start_loc[1:] - query_start_loc[:-1]
    chosen = torch.tensor([request_id in wanted for request_id in request_ids[: len(query_lengths)]], dtype=torch.bool)
    return torch.repeat_interleave(chosen.to(query_lengths.device), query_lengths)


def last_writes(slots):
    """Mask of the entries that are the last write to their slot (earlier ones would be overwritten)."""
    import torch

    order = torch.arange(len(slots), device=slots.device)
    last = torch.full((int(slots.max()) + 1,), -1, dtype=order.dtype, device=slots.device)
    last.scatter_reduce_(0, slots, order, reduce="amax")
    return last[slots] == order


class ContextBacklog:
    """The target's hidden states, positions and slots of the steps whose context is not stored yet."""

    def __init__(self) -> None:
        self.parts: list[tuple[Any, Any, Any]] = []
        self.tokens = 0

    def add(self, states, positions, slots) -> None:
        self.parts.append((states, positions, slots))
        self.tokens += len(slots)

    def store(self, model) -> None:
        """Write the backlog into the drafter's cache (``model``: the DFlash drafter) in one call."""
        if not self.parts:
            return
        import torch

        states, positions, slots = (torch.cat(column) for column in zip(*self.parts, strict=True))
        self.parts, self.tokens = [], 0
        keep = last_writes(slots)
        if not bool(keep.all()):
            states, positions, slots = states[keep], positions[keep], slots[keep]
        model.precompute_and_store_context_kv(model.combine_hidden_states(states), positions, slots)


def keep_next_tokens(runner, sampled_token_ids) -> None:
    """Under asynchronous scheduling the engine core never sees a step's sampled tokens in time, so the next
    step reads each request's last valid token from the worker (``prev_sampled_token_ids``), which vLLM sets
    while it drafts. A step whose drafts are verified but after which nothing is drafted skips that call, so
    this sets it as vLLM's padded-batch path does. Without it such a step (a request's drafts stopping to pay)
    fails vLLM's bookkeeping, which then expects one sampled token per request."""
    next_token_ids, valid_counts = runner.drafter.prepare_next_token_ids_padded(
        sampled_token_ids, runner.requests, runner.input_batch, runner.discard_request_mask.gpu
    )
    runner._copy_valid_sampled_token_count(next_token_ids, valid_counts)


def greedy_tokens(logits):
    """Each row's first highest-scoring token, as ``argmax`` over ``logits`` gives it, over float32 values."""
    return logits.float().argmax(dim=-1)


class DFlashFixHooks:
    """Hooks on the DFlash drafter (``targets.dflash``) and the worker's runner (``targets.model_runner``).
    ``cpu``: the two fixes of vLLM CPU's kernels (``normalize_context_k``, ``greedy_sample``) apply there
    only; ``register`` leaves them out of their lists elsewhere."""

    def __init__(self) -> None:
        from vllm import _custom_ops as ops
        from vllm.platforms import current_platform
        from vllm.v1.spec_decode.dflash import DFlashProposer
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        self.cpu = current_platform.is_cpu()
        self.rms_norm = ops.rms_norm
        self.one_pass = DFlashProposer
        # vLLM's own signatures (a wrapper keeps them: hooks.chain), to read arguments by name
        self.propose_signature = inspect.signature(DFlashProposer.propose)
        self.runner_propose_signature = inspect.signature(GPUModelRunner.propose_draft_token_ids)
        self.backlog, self.step_slots = ContextBacklog(), StepSlots()

    def normalize_context_k(self, proceed, model, all_k):
        """vLLM CPU's rms_norm given a [layers, head_dim] weight applies the first row to every layer."""
        return normalize_per_layer(self.rms_norm, all_k, model._k_norm_weights, model._rms_norm_eps)

    def greedy_sample(self, proceed, proposer, hidden_states):
        if proposer.use_local_argmax_reduction or proposer.use_heterogeneous_vocab:  # vLLM's own paths for those
            return proceed(hidden_states)
        return greedy_tokens(proposer.model.compute_logits(hidden_states))

    def propose(self, proceed, proposer, *args, **kwargs):
        """At 0 drafts, only the context's keys and values are stored: no forward pass."""
        bound = self.propose_signature.bind(proposer, *args, **kwargs)
        if bound.arguments.get("num_speculative_tokens") == 0 and not bound.arguments.get("mm_embed_inputs"):
            return store_context_only(proposer, bound.arguments)
        return proceed(*args, **kwargs)

    def propose_draft_token_ids(self, proceed, runner, *args, **kwargs):
        """A step that drafts nothing keeps its context aside (``ContextBacklog``), stored once the drafter
        next runs or the backlog is full; the dormant requests' context is dropped."""
        import torch

        arguments = self.runner_propose_signature.bind(runner, *args, **kwargs).arguments
        scheduler_output, aux = arguments["scheduler_output"], arguments["aux_hidden_states"]
        backlog = self.backlog
        if isinstance(runner.drafter, self.one_pass) and scheduler_output.num_spec_tokens_to_schedule == 0 and aux is not None:
            if runner.use_async_scheduling:
                keep_next_tokens(runner, arguments["sampled_token_ids"])
            wanted = getattr(scheduler_output, CONTEXT_IDS, None)  # None: every request's context is wanted
            if wanted is not None and not wanted:  # every running request dormant: nothing to keep, no work
                return torch.empty(runner.input_batch.num_reqs, 0, dtype=torch.int64, device=aux[0].device)
            count = scheduler_output.total_num_scheduled_tokens
            cad = arguments["common_attn_metadata"]
            positions = runner._get_positions(count).clone()
            slots = self.step_slots.of(cad, positions, runner.drafter.block_size)
            states = torch.cat([h[:count] for h in aux], dim=-1)
            if wanted is not None:  # dormant requests' context: never needed
                keep = request_tokens(cad.query_start_loc, runner.input_batch.req_ids, wanted)
                states, positions, slots = states[keep], positions[keep], slots[keep]
            if len(slots):
                backlog.add(states, positions, slots)
            if backlog.tokens >= BACKLOG_TOKENS:
                backlog.store(runner.drafter.model)
            return torch.empty(runner.input_batch.num_reqs, 0, dtype=torch.int64, device=positions.device)
        backlog.store(runner.drafter.model)
        return proceed(*args, **kwargs)
