"""The engine plugin's grammar-forced token count: bitmask rows, per-request bookkeeping, shared file."""

import json
from pathlib import Path

import numpy as np
import pytest

from dspark_bench.engine_patch import engine_plugin
from dspark_bench.engine_patch.engine_plugin import GrammarForcedCounter, read_counters, record_step, single_token_rows
from dspark_bench.engine_patch.state import STATUS_ENV

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


def test_single_token_rows():
    mask = _rows({5}, {5, 6}, {31}, {63}, {0, 32}, set(), {99})
    # bit 31 makes the int32 word negative: still one token
    assert single_token_rows(mask).tolist() == [True, False, True, True, False, False, True]
    assert not single_token_rows(np.full((1, 4), -1, dtype=np.int32))[0]  # vLLM's "no constraint" row


def test_counts_only_the_positions_a_step_kept(tmp_path):
    counter = GrammarForcedCounter(tmp_path / "engine-1.counters")
    # request a: 3 drafts + bonus row, forced at rows 0 and 2; request b: no drafts, forced.
    mask = _rows({7}, {1, 2}, {9}, {3}, {4})
    counter.built(mask, ["a", "b"], {"a": [7, 1, 9]})
    counter.accepted("a", 2)  # the second draft was rejected: rows 0-1 kept (1 forced)
    counter.accepted("b", 1)
    counter.accepted("c", 5)  # a request without a built mask this step is not counted
    assert read_counters(tmp_path) == {"grammar_forced_tokens": 2, "constrained_tokens": 3}
    counter.built(_rows({7}), ["a"], {})
    counter.accepted("a", 1)
    assert read_counters(tmp_path)["grammar_forced_tokens"] == 3


def test_read_counters_sums_engine_processes(tmp_path):
    for pid, values in ((1, [2, 10]), (2, [3, 5])):
        np.array(values, dtype=np.int64).tofile(tmp_path / f"engine-{pid}.counters")
    (tmp_path / "schemas.json").write_text("{}")
    assert read_counters(tmp_path) == {"grammar_forced_tokens": 5, "constrained_tokens": 15}
    assert read_counters(tmp_path / "absent") == {"grammar_forced_tokens": 0, "constrained_tokens": 0}


def test_register_leaves_stock_vllm_alone(monkeypatch, tmp_path):
    installed = []
    monkeypatch.setattr(engine_plugin, "_install", installed.append)
    monkeypatch.delenv(STATUS_ENV, raising=False)
    monkeypatch.setenv("DSPARK_STATE_DIR", str(tmp_path))
    engine_plugin.register()  # a stock server on the same installation
    monkeypatch.setenv(STATUS_ENV, json.dumps({"enabled": False}))
    engine_plugin.register()
    assert installed == []
    monkeypatch.setenv(STATUS_ENV, json.dumps({"enabled": True}))
    engine_plugin.register()
    assert len(installed) == 1 and not list(tmp_path.iterdir())  # the file appears with the first count


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


def test_dflash_context_keys_are_normalised_each_by_its_own_layer():
    """vLLM CPU's rms_norm given a [layers, head_dim] weight applies the first row to every layer; the
    plugin's per-layer call gives each layer its own (2-layer drafter: 3.9 -> 10.9 accepted per step)."""
    torch = pytest.importorskip("torch")
    from vllm import _custom_ops as ops

    keys = torch.randn(2, 5, 8, 64, dtype=torch.bfloat16)
    weights = torch.stack([torch.ones(64), torch.full((64,), 2.0)]).to(torch.bfloat16)
    unit = keys.float() * torch.rsqrt(keys.float().pow(2).mean(-1, keepdim=True) + 1e-6)
    normed = engine_plugin.normalize_per_layer(ops.rms_norm, keys, weights, 1e-6)
    assert torch.allclose(normed[0].float(), unit[0], rtol=0.02, atol=0.02)
    assert torch.allclose(normed[1].float(), 2 * unit[1], rtol=0.02, atol=0.02)
    grouped = torch.empty_like(keys)
    ops.rms_norm(grouped, keys, weights, 1e-6)  # vLLM's own grouped call, which the plugin replaces on the CPU
    if torch.allclose(grouped[1].float(), 2 * unit[1], rtol=0.02, atol=0.02):
        pytest.fail("vLLM's grouped K-norm is right on this build: the plugin's correction can go")


def test_draft_budget_follows_how_well_drafts_land():
    from dspark_bench.engine_patch.acceptance import Acceptance, draft_budget

    assert draft_budget(0.95, 12) == 12 and draft_budget(0.89, 12) == 12  # JSON: the whole block
    assert draft_budget(0.5, 12) == 3 and draft_budget(0.1, 12) == 1  # never 0: a request can recover
    assert draft_budget(0.9, 0) == 0 and draft_budget(0.99, 5) == 5
    missing = Acceptance()
    for _ in range(6):
        missing.record(12, 1)  # one draft in twelve lands, step after step
    assert 0.5 < missing.rate < 0.6 and draft_budget(missing.rate, 12) == 4
    for _ in range(10):
        missing.record(4, 4)  # then every draft lands again
    assert draft_budget(missing.rate, 12) == 12


def test_the_scheduler_verifies_only_what_each_request_earned():
    from types import SimpleNamespace

    history: dict = {}
    requests = {"json": SimpleNamespace(spec_token_ids=list(range(12))), "odd": SimpleNamespace(spec_token_ids=list(range(12)))}
    for _ in range(6):  # "json" lands all 12 drafts each step, "odd" lands 1 (2 sampled tokens); -1: grammar refused
        record_step(history, {"json": list(range(12)), "odd": [*range(11), -1]}, {"json": 0, "odd": 1}, [[0] * 13, [0, 0]])
    engine_plugin.cap_drafts(history, requests, ["json", "odd", "gone"])
    assert len(requests["json"].spec_token_ids) == 12 and len(requests["odd"].spec_token_ids) == 4
