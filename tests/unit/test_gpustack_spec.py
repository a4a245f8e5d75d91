"""GPUStack settings, the article's model YAML, model bodies and the argv check (no server needed)."""

import pytest

from dspark_bench.loadtests.config import ConfigError, load_config
from dspark_bench.loadtests.deploy.gpustack_spec import (
    GPUStackSpecError,
    arm_flags,
    article_model_from_mapping,
    engine_rejected,
    flags_missing_from_log,
    model_body,
    parse_settings,
)

ARTICLE = {  # section 5.3 of the article, verbatim
    "model_name": "deepseek-v4-1-dspark",
    "model_path": "/data/models/DeepSeek-V4.1",
    "engine": "vllm",
    "torch_dtype": "bfloat16",
    "replicas": 1,
    "engine_extra_args": ["--dspark-enabled", "--response-format", "json", "--enable-prefix-caching",
                          "--gpu-memory-utilization", "0.9"],
}  # fmt: skip


def test_article_yaml_maps_onto_gpustack_fields():
    model = article_model_from_mapping(ARTICLE)
    assert model.name == "deepseek-v4-1-dspark" and model.local_path == "/data/models/DeepSeek-V4.1"
    assert model.backend == "vLLM" and model.replicas == 1
    assert model.backend_parameters == ("--dtype=bfloat16", *ARTICLE["engine_extra_args"])


def test_article_yaml_unknown_key_is_refused_with_the_mapping():
    with pytest.raises(GPUStackSpecError) as info:
        article_model_from_mapping({**ARTICLE, "gpu_count": 2})
    message = str(info.value)
    assert "unknown key(s) ['gpu_count']" in message
    assert "engine_extra_args -> backend_parameters" in message and "model_path -> local_path" in message


@pytest.mark.parametrize(
    ("change", "expected"),
    [({"engine": "tensorrt"}, "engine 'tensorrt'"), ({"model_path": None}, "missing ['model_path']"),
     ({"replicas": 0}, "replicas 0"), ({"engine_extra_args": {"a": 1}}, "engine_extra_args must be a list")],
)  # fmt: skip
def test_article_yaml_bad_values(change, expected):
    with pytest.raises(GPUStackSpecError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        article_model_from_mapping({**ARTICLE, **change})


def test_settings_from_article_file_and_model_bodies(tmp_path):
    import yaml

    (tmp_path / "model.yaml").write_text(yaml.safe_dump(ARTICLE))
    settings = parse_settings({"url": "http://gs:80/", "article_model": str(tmp_path / "model.yaml"),
                               "gpu_selector": {"gpu_ids": ["w1:cuda:0"]},
                               "model_fields": {"dspark": {"image_name": "me/vllm-dspark:0.32"}}})  # fmt: skip
    assert settings.url == "http://gs:80" and settings.model_path == "/data/models/DeepSeek-V4.1"
    dspark_flags = arm_flags(settings, "dspark", ["--max-model-len", "1024"], ["--dspark-enabled"])
    assert dspark_flags == list(settings.article_model.backend_parameters)
    assert arm_flags(settings, "baseline", ["--max-model-len", "1024"], []) == ["--dtype=bfloat16"]
    body = model_body(settings, "dspark", dspark_flags, cluster_id=3)
    assert body["name"] == "deepseek-v4-1-dspark" and body["backend"] == "vLLM" and body["cluster_id"] == 3
    assert body["source"] == "local_path" and body["local_path"] == "/data/models/DeepSeek-V4.1"
    assert body["enable_model_route"] is True and body["replicas"] == 1
    assert body["gpu_selector"] == {"gpu_ids": ["w1:cuda:0"]} and body["image_name"] == "me/vllm-dspark:0.32"
    baseline = model_body(settings, "baseline", [], cluster_id=3)
    assert baseline["name"] == "deepseek-v4-1-dspark-baseline" and "image_name" not in baseline


def test_huggingface_source_and_plain_flags():
    settings = parse_settings({"url": "https://gs", "huggingface_repo_id": "Qwen/Qwen3-8B", "name_prefix": "CI Run"})
    body = model_body(settings, "baseline-constrained", ["--dtype", "bfloat16"], cluster_id=1)
    assert body["source"] == "huggingface" and body["huggingface_repo_id"] == "Qwen/Qwen3-8B"
    assert body["name"] == "ci-run-baseline-constrained" and body["backend_parameters"] == ["--dtype", "bfloat16"]
    assert arm_flags(settings, "dspark", ["--dtype", "bfloat16"], ["--dspark-enabled"]) == [
        "--dtype",
        "bfloat16",
        "--dspark-enabled",
    ]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("http://x", "expected a mapping"), ({"url": "gs:80", "model_path": "/m"}, "gpustack.url"),
     ({"url": "http://gs"}, "no model"), ({"url": "http://gs", "model_path": "/m", "api_key": "k"}, "unknown key(s) ['api_key']"),
     ({"url": "http://gs", "model_path": "/m", "replicas": 0}, "gpustack.replicas"),
     ({"url": "http://gs", "model_path": "/m", "cluster_id": "one"}, "gpustack.cluster_id"),
     ({"url": "http://gs", "article_model": "/nope.yaml"}, "article model file /nope.yaml")],
)  # fmt: skip
def test_bad_settings_name_the_key(raw, expected):
    with pytest.raises(GPUStackSpecError) as info:
        parse_settings(raw)
    assert expected in str(info.value)


def test_run_config_checks_the_gpustack_section():
    config = load_config(None, gpustack={"url": "http://gs", "model_path": "/on/the/workers"}, model="/not/here")
    assert config.gpustack["url"] == "http://gs"  # no local model folder needed
    with pytest.raises(ConfigError, match="gpustack.url"):
        load_config(None, gpustack={"url": "nope", "model_path": "/m"})
    with pytest.raises(ConfigError, match="not both"):
        load_config(None, gpustack={"url": "http://gs", "model_path": "/m"}, urls={"baseline": "http://a"})


# vLLM 0.32's start-up line and dspark-serve's argv line, as they appear in an instance log
VLLM_LOG = (
    "(APIServer pid=4031) INFO 11-29 12:41:33 [api_utils.py:286] non-default args: {'host': '0.0.0.0', "
    "'dtype': 'bfloat16', 'max_model_len': 1024, 'enable_prefix_caching': True, 'gpu_memory_utilization': 0.9}"
)


def test_argv_check_reads_vllm_non_default_args_and_our_argv_line():
    assert flags_missing_from_log(VLLM_LOG, ["--dtype=bfloat16", "--enable-prefix-caching", "--max-model-len", "1024"]) == []
    assert flags_missing_from_log(VLLM_LOG, ["--dspark-enabled", "--response-format", "json"]) == [
        "--dspark-enabled",
        "--response-format",
    ]
    ours = "dspark-serve argv: --model /m --dspark-enabled --response-format json\n" + VLLM_LOG
    assert flags_missing_from_log(ours, ["--dspark-enabled", "--response-format", "json", "--enable-prefix-caching"]) == []
    disabled = VLLM_LOG.replace("'enable_prefix_caching': True", "'enable_prefix_caching': False")
    assert flags_missing_from_log(disabled, ["--no-enable-prefix-caching"]) == []


def test_engine_refusal_is_found_in_the_log():
    log = "usage: vllm serve [-h] ...\nvllm serve: error: unrecognized arguments: --dspark-enabled --response-format json\n"
    assert engine_rejected(log) == "error: unrecognized arguments: --dspark-enabled --response-format json"
    assert engine_rejected(VLLM_LOG) is None
