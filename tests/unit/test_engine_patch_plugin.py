"""The engine plugin's grammar-forced token count: bitmask rows, per-request bookkeeping, shared file."""

import json
from pathlib import Path

import numpy as np
import pytest

from dspark_bench.engine_patch import engine_plugin
from dspark_bench.engine_patch.engine_plugin import GrammarForcedCounter, read_counters, single_token_rows
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
