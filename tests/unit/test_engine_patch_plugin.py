"""The engine plugin: its vLLM touchpoints, the grammar-forced token count, the DFlash K-norm, and the
speculation gate (which requests draft, shadows, probes) on vLLM's own Request objects."""

import importlib
import json
from pathlib import Path

import numpy as np
import pytest

from dspark_serve import (
    engine_plugin,
)
from dspark_serve.dflash_fixes import greedy_tokens, normalize_per_layer
from dspark_serve.engine_config import EngineConfig
from dspark_serve.grammar_counter import CountingHooks, GrammarForcedCounter, single_token_rows
from dspark_serve.state import EngineCounters, read_counters

# The embedded model, found from this file: the engine patch's tests import nothing from the harness.
DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-json"


def _rows(*allowed_sets, vocab=100):
    """An xgrammar-style int32 bitmask with the given allowed token ids per row."""
    words = (vocab + 31) // 32
    bits = np.zeros((len(allowed_sets), words), dtype=np.uint32)
    for row, allowed in enumerate(allowed_sets):
        for token in allowed:
            bits[row, token // 32] |= np.uint32(1) << np.uint32(token % 32)
    return bits.view(np.int32)


def _resolve(touchpoint: str):
    """The named attribute; a dataclass field without a default counts (it has no class attribute)."""
    module, _, qualified = touchpoint.partition(":")
    found = importlib.import_module(module)
    for name in qualified.split("."):
        if not hasattr(found, name) and name in getattr(found, "__dataclass_fields__", {}):
            return found.__dataclass_fields__[name]
        found = getattr(found, name)
    return found


@pytest.mark.parametrize("touchpoint", [t for points in engine_plugin.TOUCHPOINTS.values() for t in points])
def test_every_vllm_touchpoint_exists_in_the_supported_vllm(touchpoint):
    pytest.importorskip("vllm")
    _resolve(touchpoint)


def test_a_missing_touchpoint_is_caught():
    pytest.importorskip("vllm")
    with pytest.raises(AttributeError):
        _resolve("vllm.v1.core.sched.scheduler:Scheduler.schedule_with_dspark")


def test_single_token_rows():
    mask = _rows({5}, {5, 6}, {31}, {63}, {0, 32}, set(), {99})
    # bit 31 makes the int32 word negative: still one token
    assert single_token_rows(mask).tolist() == [True, False, True, True, False, False, True]
    assert not single_token_rows(np.full((1, 4), -1, dtype=np.int32))[0]  # vLLM's "no constraint" row


def test_counts_only_the_positions_a_step_kept(tmp_path):
    counter = GrammarForcedCounter(EngineCounters(tmp_path / "engine-1.counters"))
    # request a: 3 drafts + bonus row, forced at rows 0 and 2; request b: no drafts, forced.
    mask = _rows({7}, {1, 2}, {9}, {3}, {4})
    counter.built(mask, ["a", "b"], {"a": [7, 1, 9]})
    # a: the second draft was rejected, rows 0-1 kept (1 forced); c had no row built this step: not counted
    counter.taken_in([("a", 2), ("b", 1), ("c", 5)])
    counts = read_counters(tmp_path)
    assert (counts["grammar_forced_tokens"], counts["constrained_tokens"]) == (2, 3)
    counter.built(_rows({7}), ["a"], {})
    counter.taken_in([("a", 4)])  # more kept than the request had rows: its one row
    assert (read_counters(tmp_path)["grammar_forced_tokens"], read_counters(tmp_path)["constrained_tokens"]) == (3, 4)
    counter.taken_in([("a", 1)])  # a step's rows are counted once
    assert read_counters(tmp_path)["constrained_tokens"] == 4
    counter.built(_rows({7}), ["a", "b"], {"a": [1]})  # rows past the bitmask's end (b's; a's draft) count as none
    counter.taken_in([("a", 2), ("b", 1)])
    assert (read_counters(tmp_path)["grammar_forced_tokens"], read_counters(tmp_path)["constrained_tokens"]) == (4, 5)


def test_a_large_bitmask_is_read_at_one_step_in_n_and_its_forced_tokens_count_n_times(tmp_path, monkeypatch):
    """A bitmask over the counter's budget (a large vocabulary, a wide batch) is read at every N-th step only; the
    constrained tokens are still counted at every step."""
    from dspark_serve import grammar_counter

    reads = []
    monkeypatch.setattr(grammar_counter, "single_token_rows", lambda mask: reads.append(1) or single_token_rows(mask))
    counter = GrammarForcedCounter(EngineCounters(tmp_path / "engine-1.counters"), budget_words=2)
    forced = _rows({7}, {8}, {1, 2})  # 3 rows of 4 words: 12 words, read at one step in 6
    for _ in range(12):
        counter.built(forced, ["a", "b", "c"], {})
        counter.taken_in([("a", 1), ("b", 1), ("c", 1)])
    counts = read_counters(tmp_path)
    assert len(reads) == 2 and counts["constrained_tokens"] == 36
    assert counts["grammar_forced_tokens"] == 24  # two steps read, 2 forced each, counted 6 times


def test_the_counting_hooks_count_what_the_engine_core_outputs(tmp_path):
    """The hook on ``Scheduler.update_from_output`` reads each request's new tokens from vLLM's outputs."""
    from types import SimpleNamespace

    hooks = CountingHooks(GrammarForcedCounter(EngineCounters(tmp_path / "engine-1.counters")))
    hooks.grammar_bitmask(lambda *args: _rows({7}, {1, 2}, {3}), None, {}, ["a", "b"], {"a": [1]})  # a: a draft, then its bonus row
    out = {0: SimpleNamespace(outputs=[SimpleNamespace(request_id="a", new_token_ids=[7, 1]), SimpleNamespace(request_id="b", new_token_ids=[3])])}
    assert hooks.update_from_output(lambda *args: out, None, None, None) is out
    counts = read_counters(tmp_path)
    assert (counts["grammar_forced_tokens"], counts["constrained_tokens"]) == (2, 3)


def test_read_counters_sums_engine_processes(tmp_path):
    for pid, values in ((1, [2, 10, 7, 3, 1]), (2, [3, 5])):  # an older, shorter file still reads
        np.array(values, dtype=np.int64).tofile(tmp_path / f"engine-{pid}.counters")
    (tmp_path / "schemas.json").write_text("{}")
    counts = read_counters(tmp_path)
    assert {name: counts[name] for name in list(counts)[:5]} == {
        "grammar_forced_tokens": 5,
        "constrained_tokens": 15,
        "engine_steps": 7,
        "drafter_steps": 3,
        "probe_steps": 1,
    }
    assert counts["step_fixed_us"] == 0
    assert set(read_counters(tmp_path / "absent").values()) == {0}


@pytest.fixture
def plugin():
    """``engine_plugin.install`` on the real vLLM classes; vLLM's own methods put back afterwards."""
    pytest.importorskip("vllm")
    from dspark_serve import hooks

    yield engine_plugin.install
    engine_plugin.uninstall()
    assert not hooks.INSTALLED


POST_STEP = "vllm.v1.engine.core:EngineCore.post_step"
UPDATE_FROM_OUTPUT = "vllm.v1.core.sched.scheduler:Scheduler.update_from_output"
SAMPLE_TOKENS = "vllm.v1.worker.gpu_model_runner:GPUModelRunner.sample_tokens"
V2_SAMPLE_TOKENS = "vllm.v1.worker.gpu.model_runner:GPUModelRunner.sample_tokens"
GRAMMAR_BITMASK = "vllm.v1.core.sched.scheduler:Scheduler.get_grammar_bitmask"
INIT_CANDIDATES = "vllm.v1.worker.gpu.cudagraph_utils:ModelCudaGraphManager._init_candidates"


def test_register_leaves_stock_vllm_alone(plugin, monkeypatch):
    from vllm.v1.engine.core import EngineCore

    from dspark_serve import hooks
    from dspark_serve.engine_config import ENGINE_ENV

    post_step = EngineCore.post_step
    monkeypatch.delenv(ENGINE_ENV, raising=False)
    engine_plugin.register()  # a stock server on the same installation
    assert not hooks.INSTALLED and EngineCore.post_step is post_step


def test_each_method_has_one_wrapper_calling_its_hooks_in_the_listed_order(plugin, tmp_path):
    from vllm.v1.engine.core import EngineCore

    from dspark_serve import hooks

    post_step = EngineCore.post_step
    plugin(EngineConfig("ngram", str(tmp_path)))  # every feature on by default
    assert hooks.INSTALLED[POST_STEP] == ["EngineDraftHooks.post_step", "GateHooks.post_step", "HandoffHooks.post_step"]
    assert hooks.INSTALLED[UPDATE_FROM_OUTPUT] == [
        "CountingHooks.update_from_output", "EngineDraftHooks.update_from_output", "GateHooks.update_from_output",
        "HandoffHooks.update_from_output",
    ]  # fmt: skip
    assert hooks.INSTALLED[SAMPLE_TOKENS] == ["HandoffHooks.sample_tokens", "StockStepHooks.sample_tokens"]
    # grammar drafts under asynchronous scheduling: the engine core sends the forced text, the V2 runner drafts it
    assert hooks.INSTALLED[GRAMMAR_BITMASK] == ["ForcedTexts.get_grammar_bitmask"]
    assert hooks.INSTALLED[V2_SAMPLE_TOKENS] == ["ForcedOverlay.sample_tokens"]
    assert hooks.INSTALLED[INIT_CANDIDATES] == ["FullGraphHooks.init_candidates"]  # the target's graphs, widened
    assert "vllm.v1.spec_decode.dflash:DFlashProposer.propose" not in hooks.INSTALLED  # not the dflash drafter
    assert not list(tmp_path.iterdir())  # files appear with the first count
    plugin(EngineConfig("ngram", str(tmp_path)))  # again: the same one wrapper, on vLLM's own method
    assert getattr(EngineCore.post_step, hooks.ORIGINAL) is post_step
    assert len(getattr(EngineCore.post_step, hooks.HOOKS)) == 3


def test_switches_take_their_features_hooks_out(plugin, tmp_path):
    from dspark_serve import hooks

    plugin(EngineConfig("ngram", str(tmp_path), grammar_drafts=False))
    assert hooks.INSTALLED[POST_STEP][0] == "EngineDraftHooks.post_step"  # repeat drafts still on
    assert GRAMMAR_BITMASK not in hooks.INSTALLED and V2_SAMPLE_TOKENS not in hooks.INSTALLED
    plugin(EngineConfig("ngram", str(tmp_path), repeat_drafts=False, grammar_drafts=False, draft_handoff=False))
    assert hooks.INSTALLED[POST_STEP] == ["GateHooks.post_step"]
    assert hooks.INSTALLED[SAMPLE_TOKENS] == ["StockStepHooks.sample_tokens"]
    plugin(EngineConfig("ngram", str(tmp_path), repeat_drafts=False, grammar_drafts=False, acceptance_cap=False))
    assert hooks.INSTALLED[POST_STEP] == ["HandoffHooks.post_step"]
    plugin(EngineConfig("ngram_gpu", str(tmp_path), full_graphs=False))
    assert INIT_CANDIDATES not in hooks.INSTALLED
    plugin(EngineConfig("off", str(tmp_path)))  # speculation off: grammar-forced counts only
    assert sorted(hooks.INSTALLED) == [
        "vllm.v1.core.sched.scheduler:Scheduler.update_from_output",
        "vllm.v1.structured_output:StructuredOutputManager.grammar_bitmask",
    ]


def test_the_gpus_prompt_copy_gets_structure_predictions_and_no_other_drafter_does(plugin, tmp_path):
    from dspark_serve import hooks

    def lookahead():
        wrapper = __import__("vllm.v1.core.sched.scheduler", fromlist=["Scheduler"]).Scheduler.get_grammar_bitmask
        return getattr(wrapper, hooks.HOOKS)[0].__self__.lookahead

    plugin(EngineConfig("ngram_gpu", str(tmp_path), grammar_drafts=False))  # predictions alone still go out
    assert hooks.INSTALLED[GRAMMAR_BITMASK] == ["ForcedTexts.get_grammar_bitmask"] and lookahead() is not None
    assert hooks.INSTALLED[V2_SAMPLE_TOKENS] == ["ForcedOverlay.sample_tokens"]
    plugin(EngineConfig("dflash", str(tmp_path)))  # a learned drafter's drafts are not overlaid by predictions
    assert lookahead() is None
    plugin(EngineConfig("ngram_gpu", str(tmp_path), grammar_drafts=False, structure_lookahead=False))
    assert GRAMMAR_BITMASK not in hooks.INSTALLED and V2_SAMPLE_TOKENS not in hooks.INSTALLED


def test_the_gate_prices_its_drafters_pass_before_measuring_it(plugin, tmp_path):
    """The gate's pass cost before the machine has measured it comes from the drafter the launcher chose."""
    from vllm.v1.engine.core import EngineCore

    from dspark_serve import hooks
    from dspark_serve.acceptance import prior_draft_cost
    from dspark_serve.speculation_gate import GateHooks

    for method in ("ngram_gpu", "dflash"):
        plugin(EngineConfig(method, str(tmp_path)))
        gate = next(h.__self__.gate for h in getattr(EngineCore.post_step, hooks.HOOKS) if isinstance(h.__self__, GateHooks))
        assert gate.costs.relative(1)[1] == prior_draft_cost(method)
    assert prior_draft_cost("ngram_gpu") < prior_draft_cost("dflash")


def test_the_dflash_drafter_gets_its_fixes(plugin, tmp_path):
    from dspark_serve import hooks

    plugin(EngineConfig("dflash", str(tmp_path)))
    assert hooks.INSTALLED["vllm.v1.spec_decode.dflash:DFlashProposer.propose"] == ["DFlashFixHooks.propose"]
    assert hooks.INSTALLED["vllm.v1.worker.gpu_model_runner:GPUModelRunner.propose_draft_token_ids"] == [
        "DFlashFixHooks.propose_draft_token_ids"
    ]
    # vLLM CPU's kernels only: this is a CPU build
    assert hooks.INSTALLED["vllm.model_executor.models.qwen3_dflash:DFlashQwen3Model._normalize_context_k"]


def test_register_reads_the_launchers_config_and_refuses_another_vllm(plugin, monkeypatch, tmp_path):
    from dspark_serve import VersionError, hooks

    monkeypatch.setenv(*next(iter(EngineConfig("ngram", str(tmp_path), draft_handoff=False).to_env().items())))
    engine_plugin.register()
    assert hooks.INSTALLED[POST_STEP] == ["EngineDraftHooks.post_step", "GateHooks.post_step"]
    engine_plugin.uninstall()
    monkeypatch.setattr(engine_plugin, "installed_vllm", lambda: "0.33.0")
    with pytest.raises(VersionError, match="0.33.0 is not supported"):
        engine_plugin.register()
    assert not hooks.INSTALLED


def test_every_hooked_method_is_a_targets_and_every_target_is_hooked():
    from dspark_serve.engine_plugin import FEATURES, TARGETS

    replaced = {point for module in TARGETS for point in module.REPLACES}
    hooked = {point for module in FEATURES for point in getattr(module, "HOOKED", ())}
    assert hooked == replaced


def test_agrees_with_xgrammar_on_a_real_grammar():
    xgr = pytest.importorskip("xgrammar")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(DEFAULT_MODEL))
    vocab_size = json.loads((DEFAULT_MODEL / "config.json").read_text())["vocab_size"]
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_json_schema('{"type": "object"}', any_whitespace=True))
    bitmask = xgr.allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    assert not single_token_rows(bitmask.numpy())[0]  # anything may open the object
    for token in tokenizer.encode('{"a":1}', add_special_tokens=False):
        assert matcher.accept_token(token)
    matcher.fill_next_token_bitmask(bitmask)
    assert single_token_rows(bitmask.numpy())[0]  # after the top-level close: end of sequence only


def test_drafts_picked_in_float32_are_bfloat16s_argmax_ties_included():
    torch = pytest.importorskip("torch")
    generator = torch.Generator().manual_seed(0)
    # few distinct values: most rows hold their highest score more than once
    logits = torch.randint(0, 6, (96, 3308), generator=generator).to(torch.bfloat16) * 0.125
    assert (logits == logits.max(dim=-1, keepdim=True).values).sum(dim=-1).min() > 1
    assert torch.equal(greedy_tokens(logits), logits.argmax(dim=-1))


def test_dflash_context_keys_are_normalised_each_by_its_own_layer():
    """vLLM CPU's rms_norm given a [layers, head_dim] weight applies the first row to every layer; the
    plugin's per-layer call gives each layer its own (2-layer drafter: 3.9 -> 10.9 accepted per step)."""
    torch = pytest.importorskip("torch")
    from vllm import _custom_ops as ops

    keys = torch.randn(2, 5, 8, 64, dtype=torch.bfloat16)
    weights = torch.stack([torch.ones(64), torch.full((64,), 2.0)]).to(torch.bfloat16)
    unit = keys.float() * torch.rsqrt(keys.float().pow(2).mean(-1, keepdim=True) + 1e-6)
    normed = normalize_per_layer(ops.rms_norm, keys, weights, 1e-6)
    assert torch.allclose(normed[0].float(), unit[0], rtol=0.02, atol=0.02)
    assert torch.allclose(normed[1].float(), 2 * unit[1], rtol=0.02, atol=0.02)
    grouped = torch.empty_like(keys)
    ops.rms_norm(grouped, keys, weights, 1e-6)  # vLLM's own grouped call, which the plugin replaces on the CPU
    if torch.allclose(grouped[1].float(), 2 * unit[1], rtol=0.02, atol=0.02):
        pytest.fail("vLLM's grouped K-norm is right on this build: the plugin's correction can go")




def test_deferred_context_lands_in_the_slots_vllms_dflash_kernel_computes():
    """context_slots against vLLM's own DFlash input kernel (its CPU fallback), on two requests of a step."""
    torch = pytest.importorskip("torch")
    from vllm.utils import cpu_triton_utils

    from dspark_serve.dflash_fixes import context_slots

    block_size, block_table = 4, torch.tensor([[7, 3, 9, 0], [2, 5, 0, 0]], dtype=torch.int32)
    query_start_loc = torch.tensor([0, 3, 4], dtype=torch.int32)  # request 0: 3 context tokens, request 1: 1
    positions = torch.tensor([5, 6, 7, 4], dtype=torch.int64)
    out = {name: torch.zeros(n, dtype=torch.int64) for name, n in (("ids", 4), ("ctx_pos", 4), ("q_pos", 4), ("ctx_slots", 4), ("q_slots", 4))}
    token_indices = torch.zeros(2, dtype=torch.int32)
    kernel = cpu_triton_utils._copy_and_expand_dflash_inputs_kernel_impl
    kernel(
        torch.tensor([11, 12]), positions, out["ids"], out["ctx_pos"], out["q_pos"], out["ctx_slots"], out["q_slots"],
        token_indices, block_table, block_table.stride(0), query_start_loc, None, 0, block_size, 2, 1, 4,
    )
    assert context_slots(block_table, query_start_loc, positions, block_size).tolist() == out["ctx_slots"].tolist()


def test_step_slots_reuse_vllms_slot_mapping_only_where_it_equals_dflashs_formula():
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from dspark_serve.dflash_fixes import StepSlots, context_slots

    block_size, block_table = 4, torch.tensor([[7, 3, 9, 0], [2, 5, 0, 0]], dtype=torch.int32)
    query_start_loc, positions = torch.tensor([0, 3, 4], dtype=torch.int32), torch.tensor([5, 6, 7, 4])
    formula = context_slots(block_table, query_start_loc, positions, block_size)
    padded = torch.cat([formula, torch.tensor([-1, -1])])  # vLLM's buffer runs past the step's tokens
    same = SimpleNamespace(block_table_tensor=block_table, query_start_loc=query_start_loc, slot_mapping=padded)
    slots = StepSlots()
    for _ in range(StepSlots.CHECKED + 2):
        got = slots.of(same, positions, block_size)
        assert got.tolist() == formula.tolist() and got.data_ptr() != padded.data_ptr()  # a copy: vLLM reuses its buffer
    assert slots.agreed == StepSlots.CHECKED and not slots.differs
    # A mapping of another KV-cache layout (here: another block size) is caught, and never used after.
    other = SimpleNamespace(block_table_tensor=block_table, query_start_loc=query_start_loc, slot_mapping=padded)
    slots = StepSlots()
    assert slots.of(other, positions, 2).tolist() == context_slots(block_table, query_start_loc, positions, 2).tolist()
    assert slots.differs
    assert slots.of(other, positions, 2).tolist() != formula.tolist()


def test_the_backlog_is_stored_in_one_call_and_the_latest_write_to_a_slot_wins():
    torch = pytest.importorskip("torch")
    from dspark_serve.dflash_fixes import ContextBacklog, last_writes

    assert last_writes(torch.tensor([5, 2, 5, 7])).tolist() == [False, True, True, True]
    calls = []

    class Drafter:
        def combine_hidden_states(self, states):
            return states * 10

        def precompute_and_store_context_kv(self, states, positions, slots):
            calls.append((states[:, 0].tolist(), positions.tolist(), slots.tolist()))

    backlog = ContextBacklog()
    backlog.store(Drafter())
    assert calls == []  # nothing kept aside: nothing stored
    backlog.add(torch.tensor([[1.0], [2.0]]), torch.tensor([0, 1]), torch.tensor([40, 41]))
    backlog.add(torch.tensor([[3.0]]), torch.tensor([0]), torch.tensor([40]))  # slot 40 freed and given to another request
    assert backlog.tokens == 3
    backlog.store(Drafter())
    assert calls == [([20.0, 30.0], [1, 0], [41, 40])] and backlog.tokens == 0


def test_only_the_wanted_requests_tokens_are_kept_for_the_drafter():
    torch = pytest.importorskip("torch")
    from dspark_serve.dflash_fixes import request_tokens

    query_start_loc = torch.tensor([0, 3, 4, 6])  # three requests: 3, 1 and 2 tokens this step
    assert request_tokens(query_start_loc, ["a", "b", "c"], {"a", "c"}).tolist() == [True] * 3 + [False] + [True] * 2
    assert request_tokens(query_start_loc, ["a", "b", "c"], frozenset()).tolist() == [False] * 6


def test_a_step_without_drafts_is_prepared_on_vllms_plain_path_only_where_that_is_the_same():
    from types import SimpleNamespace

    from dspark_serve.no_draft_step import plain_path

    def runner(speculative=True, hybrid=False, attention_free=False):
        model_config = SimpleNamespace(is_hybrid=hybrid, is_attention_free=attention_free)
        return SimpleNamespace(speculative_config=object() if speculative else None, model_config=model_config)

    def step(drafts):
        return SimpleNamespace(scheduled_spec_decode_tokens=drafts)

    assert plain_path(runner(), step({}))  # speculation configured, nothing to verify: the plain path
    assert not plain_path(runner(), step({"r": [5, 6]}))  # drafts to verify: vLLM's speculative path
    assert not plain_path(runner(speculative=False), step({}))  # stock vLLM: its own path, untouched
    assert not plain_path(runner(hybrid=True), step({}))  # state backends read the per-step draft counts
    assert not plain_path(runner(attention_free=True), step({}))


def test_a_step_after_which_the_drafter_has_nothing_to_do_runs_as_stock_vllms():
    from types import SimpleNamespace

    from dspark_serve.no_draft_step import drafter_idle
    from dspark_serve.state import CONTEXT_IDS

    class OnePass:  # stands for vLLM's DFlashProposer
        pass

    def step(drafts_after, kept=None):
        scheduled = SimpleNamespace(num_spec_tokens_to_schedule=drafts_after)
        setattr(scheduled, CONTEXT_IDS, kept)
        return scheduled

    one_pass = SimpleNamespace(drafter=OnePass())
    assert drafter_idle(one_pass, step(0, frozenset()), OnePass)  # no pass after it, no context kept
    assert not drafter_idle(one_pass, step(12, frozenset()), OnePass)  # the drafter runs after it (a probe)
    assert not drafter_idle(one_pass, step(0, frozenset({"r"})), OnePass)  # r's context is kept
    assert not drafter_idle(one_pass, step(0, None), OnePass)  # every request's context is kept
    # a draft model keeps its own KV cache in step with every token: it runs after every step
    assert not drafter_idle(SimpleNamespace(drafter=object()), step(0, frozenset()), OnePass)


def test_forced_texts_go_out_only_for_drafts_the_gate_will_verify(plugin, tmp_path):
    """Under asynchronous scheduling the gate plans whether the worker's drafts after a step are verified before
    vLLM asks for that step's bitmask: where they will not be, no forced text or prediction is worked out."""
    from vllm.v1.core.sched.scheduler import Scheduler

    from dspark_serve import hooks

    plugin(EngineConfig("ngram_gpu", str(tmp_path)))
    texts = getattr(Scheduler.get_grammar_bitmask, hooks.HOOKS)[0].__self__
    gate = getattr(Scheduler.update_from_output, hooks.HOOKS)[2].__self__.gate
    for planned in (False, True):
        gate.drafting = planned
        assert texts.drafting() is planned
    plugin(EngineConfig("ngram_gpu", str(tmp_path), acceptance_cap=False))  # no gate: every step's drafts verify
    assert getattr(Scheduler.get_grammar_bitmask, hooks.HOOKS)[0].__self__.drafting()
