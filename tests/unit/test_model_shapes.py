"""A model of realistic size with no weights (``--model-shape``), the cost-only run it makes, and the peer arm
(stock vLLM's own prompt-lookup speculation): what each server is given, and what the comparison divides."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from dspark_bench.loadtests.config import ConfigError, load_config
from dspark_bench.loadtests.deploy.servers import server_specs
from dspark_bench.loadtests.machine import machine_facts
from dspark_bench.loadtests.model_shapes import SHAPES, ShapeError, parameters, shaped_config, write_shaped_model
from dspark_bench.loadtests.results import levels_frame, load_results
from dspark_bench.loadtests.sweep import shaped_run
from dspark_bench.reports.compare import RAW_THROUGHPUT, THROUGHPUT, build_comparison, ratios
from dspark_bench.reports.tables import format_summary, summary_frame

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "models" / "tiny-json"
TOKENIZER = ROOT / "models" / "tokenizer"


def test_an_8b_shape_has_llama_3_8bs_layers_and_the_tokenizers_vocabulary(tmp_path):
    folder = write_shaped_model("llama-8b", TINY, tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_key_value_heads"]) == (4096, 32, 8)
    assert config["vocab_size"] == json.loads((TINY / "config.json").read_text())["vocab_size"]
    assert 6.9e9 < parameters(config) < 7.1e9  # 6.98B in the decoder layers, 27M in a 3,308-token embedding and head
    assert (folder / "tokenizer.json").read_bytes() == (TINY / "tokenizer.json").read_bytes()
    assert not list(folder.glob("*.safetensors"))  # no weights: vLLM's dummy ones
    # a tokenizer folder alone (no config.json) gives the same vocabulary and special token ids
    assert shaped_config("llama-8b", TOKENIZER) == shaped_config("llama-8b", TINY)


def test_a_shape_of_your_own_is_a_config_json(tmp_path):
    own = tmp_path / "my-shape.json"
    own.write_text(json.dumps({**SHAPES["llama-1b"], "num_hidden_layers": 2}))
    assert shaped_config(str(own), TINY)["num_hidden_layers"] == 2
    assert load_config(model_shape=str(own)).cost_only
    with pytest.raises(ConfigError, match="setting 'model_shape': unknown shape 'llama-9b'; fix: use one of llama-8b"):
        load_config(model_shape="llama-9b")
    with pytest.raises(ConfigError, match="model_shape.*only local arms are shaped"):
        load_config(model_shape="llama-8b", urls={"baseline-constrained": "http://h:1"}, arms=["baseline-constrained"])
    with pytest.raises(ShapeError, match="no tokenizer"):
        write_shaped_model("llama-8b", tmp_path, tmp_path / "out")


def test_a_shaped_run_serves_the_shape_with_dummy_weights_under_its_name(tmp_path):
    config = shaped_run(load_config(model_shape="llama-8b", arms=["baseline-constrained", "dspark"]), tmp_path)
    assert Path(config.model) == tmp_path / "model" and (tmp_path / "model" / "config.json").is_file()
    assert config.served_model_name == "llama-8b"
    for spec in server_specs(config, list(config.arms)):
        assert spec.model_path == str(tmp_path / "model") and spec.served_name == "llama-8b"
        assert spec.common_args[-2:] == ["--load-format", "dummy"]
    plain = load_config(arms=["baseline-constrained"])
    assert shaped_run(plain, tmp_path) is plain and "--load-format" not in server_specs(plain, ["baseline-constrained"])[0].common_args


def test_the_peer_arm_is_vllms_own_prompt_lookup_on_the_gpu_and_on_the_cpu():
    config = load_config(arms=["baseline-constrained", "vllm-ngram"])
    gpu_host = replace(machine_facts(), gpu="GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)")
    cpu_host = replace(machine_facts(), gpu=None)
    on_gpu, on_cpu = (server_specs(config, ["vllm-ngram"], host)[0] for host in (gpu_host, cpu_host))
    assert on_gpu.launcher == on_cpu.launcher and on_gpu.launcher[-1] == "vllm.entrypoints.openai.api_server"  # stock vLLM
    gpu_method, cpu_method = (json.loads(spec.arm_args[1])["method"] for spec in (on_gpu, on_cpu))
    assert (gpu_method, cpu_method) == ("ngram_gpu", "ngram")
    assert json.loads(on_gpu.arm_args[1])["num_speculative_tokens"] == 5


def test_a_custom_arm_may_name_its_gpu_arguments(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("arms: [baseline-constrained, mine]\ncustom_arms:\n  - {name: mine, server_args: [--a], gpu_server_args: [--b]}\n")
    arm = load_config(path).arm("mine")
    assert (arm.args_on(False), arm.args_on(True)) == (("--a",), ("--b",))


def test_a_cost_only_runs_ratios_are_over_raw_tokens_and_validity_is_not_reported():
    results = load_results(ROOT / "benchmarks" / "dspark" / "broad" / "examples-s18")  # a quarter of the answers cut
    frame = levels_frame(results)
    assert (frame[RAW_THROUGHPUT] != frame[THROUGHPUT]).any()  # the two columns tell apart here
    shaped = replace(results, config=replace(results.config, model_shape="llama-8b"))
    comparison = build_comparison(shaped)
    assert comparison.metric == RAW_THROUGHPUT
    raw = ratios(frame, "baseline-constrained", RAW_THROUGHPUT)
    assert {key: paired.ratio for key, paired in comparison.throughput.items()} == {key: paired.ratio for key, paired in raw.items()}
    assert build_comparison(results).metric == THROUGHPUT
    # a quarter of these answers were cut: a warning for a real model, none for dummy weights (levels.csv too)
    assert build_comparison(results).warnings and not comparison.warnings
    assert not levels_frame(shaped)["warnings"].str.len().any()
    summary = summary_frame(shaped, comparison=comparison)
    assert "raw tok/s" in summary and "eff tok/s" not in summary and "invalid JSON" not in summary
    assert "raw tok/s" in format_summary(summary, compact=True).splitlines()[0]


def test_the_summary_says_how_many_answers_equal_stocks_at_temperature_0():
    from dspark_bench.reports.compare import Comparison
    from dspark_bench.reports.tables import agreement_lines

    comparison = Comparison(agreement={("s", 1.0, "dspark"): (8, 8), ("s", 8.0, "dspark"): (31, 32), ("s", 1.0, "vllm-ngram"): (8, 8)})
    assert agreement_lines(comparison, 0.0) == [
        "answers equal to baseline-constrained's, same prompt (temperature 0): dspark 39/40, vllm-ngram 8/8"
    ]
    assert agreement_lines(comparison, 1.0) == [] and agreement_lines(Comparison(), 0.0) == []
