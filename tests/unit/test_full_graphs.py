"""Full CUDA graphs for every uniform decode step under DSpark's dynamic draft length (``full_graphs``): vLLM's
own graph manager builds its candidates and dispatches batches (no GPU: no graph is captured or replayed),
once as vLLM has them and once widened."""

from types import SimpleNamespace

import pytest

from dspark_serve.full_graphs import FullGraphHooks, widen

cudagraph_utils = pytest.importorskip("vllm.v1.worker.gpu.cudagraph_utils")
from vllm.config.compilation import CUDAGraphMode  # noqa: E402

CudaGraphManager = cudagraph_utils.CudaGraphManager
# The capture sizes and the dynamic schedule of session 57's H100 servers (tiny-json, dspark-serve --dspark-drafter
# ngram: up to 8 drafts, fewer under load, none past 256 requests), max_num_seqs 1024 as vLLM sets it on an H100.
SIZES = [*range(1, 11), *range(12, 20, 2), *range(20, 40, 4), *range(40, 256, 8), *range(256, 513, 16)]
SCHEDULE = [[1, 56, 8], [57, 64, 7], [65, 73, 6], [74, 85, 5], [86, 102, 4], [103, 128, 3], [129, 170, 2], [171, 256, 1], [257, 1024, 0]]  # fmt: skip


def manager(schedule=SCHEDULE, max_num_seqs=1024, k=8):
    """An object carrying what vLLM's ``CudaGraphManager._init_candidates`` and ``dispatch`` read, with the
    candidates vLLM's own code built for it."""
    speculative = SimpleNamespace(
        num_speculative_tokens_per_batch_size=schedule, uses_dynamic_speculative_decoding=lambda: schedule is not None
    )
    stub = SimpleNamespace(
        compilation_config=SimpleNamespace(cudagraph_capture_sizes=SIZES, max_cudagraph_capture_size=max(SIZES)),
        cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE,
        max_num_reqs=max_num_seqs,
        decode_query_len=1 + k,
        varlen_decode=False,
        lora_capture_cases=[0],
        vllm_config=SimpleNamespace(
            speculative_config=speculative, num_speculative_tokens=k, cache_config=SimpleNamespace(use_kda_recoverssm=False)
        ),
        _maybe_ubatch_twin=lambda desc: None,
        _resolve_effective_loras=lambda loras: loras,
        _candidates={},
        _capture_descs={},
        _graphs_captured=True,
    )
    CudaGraphManager._init_candidates(stub)
    return stub


def dispatch(stub, requests: int, query_len: int):
    """The graph vLLM's dispatch picks for a decode step of ``requests`` requests at ``query_len`` tokens each."""
    tokens = requests * query_len
    return CudaGraphManager.dispatch(stub, requests, tokens, query_len, num_active_loras=0, max_query_len=query_len)


def test_a_plain_step_vllm_sends_piecewise_gets_the_full_graph_stock_vllm_would_pad_it_onto():
    stub = manager()
    before = dispatch(stub, 63, 1)
    assert before.cg_mode == CUDAGraphMode.PIECEWISE  # the 63-token graphs are of 9 and 7 tokens a request
    hooks = FullGraphHooks()
    hooks.init_candidates(lambda: None, stub)
    after = dispatch(stub, 63, 1)
    assert (after.cg_mode, after.num_tokens, after.num_reqs, after.uniform_token_count) == (CUDAGraphMode.FULL, 64, 64, 1)


def test_every_step_vllm_ran_on_a_full_graph_keeps_that_graph_and_no_step_runs_piecewise_where_a_full_graph_holds_it():
    stub = manager()
    lengths = sorted({desc.uniform_token_count for descs in stub._candidates.values() for desc in descs if desc.uniform_token_count})
    assert lengths == list(range(1, 10))  # 1 + k for every k of the schedule, 0 included
    steps = [(requests, q) for q in lengths for requests in range(1, 512 // q + 1)]
    before = {step: dispatch(stub, *step) for step in steps}
    stub._candidates = widen(stub._candidates)
    after = {step: dispatch(stub, *step) for step in steps}
    moved = [step for step in steps if before[step] != after[step]]
    assert moved and all(before[step].cg_mode == CUDAGraphMode.PIECEWISE for step in moved)
    assert all(after[step].cg_mode == CUDAGraphMode.FULL for step in moved)
    assert all(after[step].uniform_token_count == step[1] and after[step].num_reqs >= step[0] for step in moved)
    full = {desc for descs in stub._candidates.values() for desc in descs if desc.cg_mode == CUDAGraphMode.FULL}
    for step in steps:  # widened, a step runs piecewise only where no full graph of its length is large enough
        if after[step].cg_mode != CUDAGraphMode.FULL:
            assert not any(d.uniform_token_count == step[1] and d.num_reqs >= step[0] for d in full), step


def test_mixed_batches_and_a_fixed_draft_length_are_left_as_vllm_has_them():
    stub = manager()
    widened = widen(stub._candidates)
    for key, descs in stub._candidates.items():
        assert [d for d in widened[key] if d.cg_mode != CUDAGraphMode.FULL] == [d for d in descs if d.cg_mode != CUDAGraphMode.FULL]
        assert widened[key][: len([d for d in descs if d.cg_mode == CUDAGraphMode.FULL])] == [d for d in descs if d.cg_mode == CUDAGraphMode.FULL]
    prefill = CudaGraphManager.dispatch(stub, 3, 40, None, num_active_loras=0, max_query_len=None)
    stub._candidates = widened
    assert CudaGraphManager.dispatch(stub, 3, 40, None, num_active_loras=0, max_query_len=None) == prefill
    fixed = manager(schedule=None, k=5)  # vLLM's ngram_gpu peer: one query length, nothing hidden
    assert widen(fixed._candidates) == fixed._candidates
