"""A cost-only run end to end on real vLLM CPU servers: a model shape of your own with the embedded tokenizer and
vLLM's dummy weights, stock vLLM against the peer arm (stock vLLM with its own prompt lookup), by ``dspark-bench
bench`` as a user runs it. The GPU runs the same path with ``--model-shape llama-8b`` (configs/gpu-8b-cost.yaml)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_bench.loadtests.model_shapes import SHAPES

pytestmark = [pytest.mark.integration, pytest.mark.starts_servers]
ROOT = Path(__file__).resolve().parents[2]


def test_a_shaped_model_serves_with_dummy_weights_and_the_run_says_it_is_cost_only(tmp_path):
    shape = tmp_path / "small-llama.json"  # llama-1b's kind of layers, small enough for two CPU servers
    shape.write_text(json.dumps({**SHAPES["llama-1b"], "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
                                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64}))  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "dspark_bench", "bench", "--model", "models/tokenizer", "--model-shape", str(shape),
         "--arms", "baseline-constrained,vllm-ngram", "--levels", "2", "--requests", "4", "--warmup", "0",
         "--max-tokens", "48", "--out", str(tmp_path), "--name", "cost"],  # fmt: skip
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "cost"
    results = json.loads((run / "results.json").read_text())
    assert results["config"]["model_shape"] == str(shape) and Path(results["config"]["model"]) == run / "model"
    for arm in results["arms"].values():
        argv = arm["argv"]
        assert argv[argv.index("--load-format") + 1] == "dummy" and argv[argv.index("--served-model-name") + 1] == "small-llama"
    ngram = results["arms"]["vllm-ngram"]["argv"]
    assert json.loads(ngram[ngram.index("--speculative-config") + 1])["method"] == "ngram"  # this CPU's
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in records if not r["tail"]]  # a tail request still in flight at the level's end is cancelled
    assert measured and all(r["status"] == 200 and r["output_tokens"] for r in measured)  # every measured request answered
    # the summary says what the figures are over, and gives the peer's ratio over raw tokens
    assert "cost-only: a" in out.stdout and "raw output tok/s" in out.stdout and "raw tok/s" in out.stdout
    assert "eff tok/s" not in out.stdout
    # dummy weights answer noise, but the same noise: prompt lookup verified by the model changes no answer
    assert "answers equal to baseline-constrained's, same prompt (temperature 0): vllm-ngram 8/8" in out.stdout
    assert "cost-only" in (run / "report.html").read_text()
    # how each server says it ran, from its own log: the CPU build's V1 runner without CUDA graphs, and the peer's
    # speculation turning asynchronous scheduling off
    engines = {name: arm["engine"] for name, arm in results["arms"].items()}
    assert {engine["runner"] for engine in engines.values()} == {"V1"}
    assert {engine["cudagraph_mode"] for engine in engines.values()} == {"NONE"}
    assert engines["baseline-constrained"]["async_off"] is None and "ngram" in engines["vllm-ngram"]["async_off"]
    assert "engine, as each server's log says:" in out.stdout and "  vllm-ngram: V1 runner; no CUDA graphs; asynchronous scheduling off" in out.stdout
    assert "engine, as its log says: V1 runner" in (run / "report.html").read_text()
