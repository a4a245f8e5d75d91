"""The acceptance cap on vLLM's own asynchronous scheduler (a GPU's default for dflash, draft_model, ngram_gpu
and dspark): a real ``AsyncScheduler`` schedules placeholders, the gate lets every request of a step verify them or
none (or, with ``uniform`` off, cuts them per request), and a model that lands some requests' drafts and none of
the others' is simulated step by step."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dspark_serve.acceptance import StepCosts
from dspark_serve.speculation_gate import REJUDGE_STEPS, GateHooks, SpeculationGate
from dspark_serve.state import EngineCounters, read_counters

MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-json"
DRAFTS = 4
BLOCK = 16


@pytest.fixture
def patched() -> Iterator[Callable[[SpeculationGate], None]]:
    """The gate's hooks on vLLM's scheduler and engine core, as the plugin lists them; vLLM's own methods
    put back afterwards (a target given no hooks restores them)."""
    pytest.importorskip("vllm")
    from dspark_serve.targets import engine_core, scheduler

    def install(gate: SpeculationGate) -> None:
        hooks = GateHooks(gate)
        scheduler.install(
            update_after_schedule=[hooks.update_after_schedule],
            async_update_after_schedule=[hooks.async_update_after_schedule],
            update_from_output=[hooks.update_from_output],
            update_draft_token_ids=[hooks.update_draft_token_ids],
        )
        engine_core.install(post_step=[hooks.post_step])

    yield install
    scheduler.install()
    engine_core.install()


def _gate(counters: EngineCounters | None = None, uniform: bool = True) -> SpeculationGate:
    """A gate that keeps its fallback costs: the simulated steps' wall times are not a machine's."""
    costs = StepCosts()
    costs.record = lambda *step: None  # type: ignore[method-assign]
    return SpeculationGate(counters, costs=costs, governor=None, uniform=uniform)


def _async_scheduler():
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    config = VllmConfig(
        scheduler_config=SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=1024, max_model_len=1024, is_encoder_decoder=False),
        model_config=ModelConfig(model=str(MODEL), dtype="float32", seed=0, skip_tokenizer_init=True),
        cache_config=CacheConfig(block_size=BLOCK, enable_prefix_caching=False),
        speculative_config=SpeculativeConfig(method="ngram", num_speculative_tokens=DRAFTS, prompt_lookup_min=2, prompt_lookup_max=4),
    )
    # vLLM validates asynchronous scheduling against the drafter it would load; the scheduler is what is tested.
    config.scheduler_config.async_scheduling = True
    config.cache_config.num_gpu_blocks = 512
    kv_cache = KVCacheConfig(
        num_blocks=512,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32))],
    )
    return AsyncScheduler(vllm_config=config, kv_cache_config=kv_cache, structured_output_manager=StructuredOutputManager(config), block_size=BLOCK)


def _run(scheduler, landing: dict[str, bool], steps: int, overlapped: bool = False) -> list[dict[str, int]]:
    """Add one request per entry of ``landing`` (whether the model accepts its drafts) and run ``steps``
    steps; per step, the draft positions each request verified. ``overlapped``: as vLLM's engine core runs
    an asynchronous scheduler (``step_with_batch_queue``), each step is scheduled before the output of the
    one before it is processed."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    for number, request_id in enumerate(landing):
        scheduler.add_request(Request(request_id, [10 + number] * 8, SamplingParams(max_tokens=10_000, ignore_eos=True), None))

    def processed(output) -> dict[str, int]:
        ids = list(output.num_scheduled_tokens)
        drafts = {r: len(output.scheduled_spec_decode_tokens.get(r, ())) for r in ids}
        sampled = [[5] * ((drafts[r] if landing[r] else 0) + 1) for r in ids]
        scheduler.update_from_output(output, ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled))
        return drafts

    verified, in_flight = [], None
    for _ in range(steps):
        output = scheduler.schedule()
        if not overlapped:
            verified.append(processed(output))
            continue
        if in_flight is not None:
            verified.append(processed(in_flight))
        in_flight = output
    return verified


@pytest.mark.parametrize("overlapped", [False, True])
def test_vllms_async_scheduler_verifies_every_placeholder_for_every_request(patched, overlapped):
    """Without the gate (the baseline the cap changes): every request verifies all its placeholders."""
    verified = _run(_async_scheduler(), {"hit": True, "miss": False}, 40, overlapped)
    assert all(step == {"hit": DRAFTS, "miss": DRAFTS} for step in verified[3:])


@pytest.mark.parametrize("overlapped", [False, True])
def test_the_cap_cuts_placeholders_of_a_request_whose_drafts_miss_and_rejudges_it(patched, tmp_path, overlapped):
    """With ``uniform`` off (DSPARK_UNIFORM_DRAFTS=0): each request's placeholders cut to its own budget."""
    gate = _gate(EngineCounters(tmp_path / "engine-1.counters"), uniform=False)
    patched(gate)
    scheduler = _async_scheduler()
    steps = 3 * REJUDGE_STEPS
    verified = _run(scheduler, {"hit": True, "miss": False}, steps, overlapped)
    assert all(step["hit"] == DRAFTS for step in verified[3:])  # drafts that land keep every position
    missed = [step["miss"] for step in verified]
    dormant_from = missed.index(0, 3)  # a few misses, then no positions at all
    assert dormant_from < 10
    rejudged = [i for i, n in enumerate(missed) if i > dormant_from and n]
    assert len(rejudged) == 2 and rejudged[1] - rejudged[0] == REJUDGE_STEPS  # verified again, once per REJUDGE_STEPS
    assert sum(missed[rejudged[0] + 1 : rejudged[1]]) == 0
    counts = read_counters(tmp_path)
    assert counts["async_steps"] == counts["engine_steps"] == steps
    assert gate.history["miss"].rate < 0.3 < 0.9 < gate.history["hit"].rate


def test_where_no_request_pays_the_async_scheduler_schedules_no_drafts(patched):
    gate = _gate()
    patched(gate)
    verified = _run(_async_scheduler(), {"a": False, "b": False}, 24)
    assert not any(any(step.values()) for step in verified[10:])  # neither verifies, and the drafter does not run
    assert not gate.drafting


@pytest.mark.parametrize("overlapped", [False, True])
def test_every_request_of_a_step_verifies_the_same_drafts_where_the_batch_pays(patched, overlapped):
    """Uniform (the default): a request whose drafts land and one whose drafts miss verify the same number of
    drafts at every step, all of vLLM's length where the batch pays, so the step keeps vLLM's uniform batch shape."""
    gate = _gate()
    patched(gate)
    verified = _run(_async_scheduler(), {"hit": True, "miss": False}, 40, overlapped)
    assert all(step["hit"] == step["miss"] for step in verified)
    assert all(step["hit"] == DRAFTS for step in verified[3:])  # one landing request pays for both
    assert gate.history["miss"].rate < 0.3 < 0.9 < gate.history["hit"].rate  # each still judged on its own


def test_one_landing_request_does_not_pay_for_a_batch_whose_drafts_miss(patched):
    """Seven requests whose drafts miss and one whose drafts land: drafting would verify drafts for all eight,
    which the one does not pay for, so the batch stops drafting (probes aside), all of it."""
    gate = _gate()
    patched(gate)
    landing = {"hit": True} | {f"miss{i}": False for i in range(7)}
    verified = _run(_async_scheduler(), landing, 30)
    assert all(len(set(step.values())) == 1 for step in verified)  # one length for the whole batch, always
    assert not any(any(step.values()) for step in verified[10:])
    assert gate.history["hit"].rate > 0.9
