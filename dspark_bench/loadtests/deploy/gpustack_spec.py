"""What to ask a GPUStack 2.x server for: settings, the article's model YAML, model bodies, the argv check.

Pure functions only (no network): ``loadtests.gpustack_deploy`` does the talking. Field names follow
GPUStack 2.x's REST API (``POST /v2/models``); the article's ``gpustack model create`` command and its
``--engine-extra-args`` do not exist, so its YAML is mapped onto the real fields here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dspark_bench.files import FileProblem, read_yaml_mapping


class GPUStackSpecError(ValueError):
    """A GPUStack setting or model file that cannot work; the message names it and the fix."""


# The article's model YAML (section 5.3) -> GPUStack 2.x model fields.
ARTICLE_KEYS: dict[str, str] = {
    "model_name": "name",
    "model_path": "local_path (with source: local_path)",
    "engine": "backend (vllm -> vLLM)",
    "torch_dtype": "--dtype=<value> inside backend_parameters",
    "replicas": "replicas",
    "engine_extra_args": "backend_parameters",
}
BACKENDS = {"vllm": "vLLM", "sglang": "SGLang"}

_SETTING_KEYS = {
    "url": "the GPUStack server, e.g. http://gpustack.example:80",
    "api_key_env": "environment variable holding the API key (default GPUSTACK_API_KEY)",
    "cluster_id": "cluster to deploy on (default: the server's default cluster)",
    "model_path": "model folder on the workers (source: local_path)",
    "huggingface_repo_id": "Hugging Face id instead of model_path",
    "article_model": "the article's model YAML: name, path, dtype, replicas and the dspark arm's flags",
    "replicas": "instances per arm (default 1)",
    "gpu_selector": "GPUStack's gpu_selector, e.g. {gpu_ids: ['worker1:cuda:0']}",
    "backend_version": "vLLM version the workers should run",
    "name_prefix": "models are named <prefix>-<arm> (default dspark-bench; article_model: its model_name)",
    "ready_timeout_s": "how long to wait for every instance to be running (default 1800)",
    "poll_interval_s": "seconds between state polls (default 5)",
    "model_fields": "extra GPUStack model fields per arm, e.g. {dspark: {image_name: my/vllm-dspark:0.32}}",
}


@dataclass(frozen=True)
class ArticleModel:
    """The article's YAML, read and mapped."""

    name: str
    local_path: str
    backend: str
    backend_parameters: tuple[str, ...]
    replicas: int


@dataclass(frozen=True)
class GPUStackSettings:
    url: str
    api_key_env: str = "GPUSTACK_API_KEY"
    cluster_id: int | None = None
    model_path: str | None = None
    huggingface_repo_id: str | None = None
    article_model: ArticleModel | None = None
    replicas: int = 1
    gpu_selector: dict[str, Any] | None = None
    backend_version: str | None = None
    name_prefix: str = "dspark-bench"
    ready_timeout_s: float = 1800.0
    poll_interval_s: float = 5.0
    model_fields: dict[str, dict[str, Any]] = field(default_factory=dict)


def read_article_model(path: str | Path) -> ArticleModel:
    """Read the article's model YAML; unknown keys are refused with the whole mapping in the message."""
    try:
        raw = read_yaml_mapping(path, f"write the article's keys: {', '.join(ARTICLE_KEYS)}")
    except FileProblem as exc:
        raise GPUStackSpecError(f"article model file {exc}") from None
    return article_model_from_mapping(raw, str(path))


def article_model_from_mapping(raw: Any, where: str = "article model") -> ArticleModel:
    mapping = "; ".join(f"{k} -> {v}" for k, v in ARTICLE_KEYS.items())
    if not isinstance(raw, dict):
        raise GPUStackSpecError(f"{where}: expected a mapping of {', '.join(ARTICLE_KEYS)}; the keys map as {mapping}")
    unknown = sorted(set(raw) - set(ARTICLE_KEYS))
    if unknown:
        raise GPUStackSpecError(f"{where}: unknown key(s) {unknown}; the article's keys map as {mapping}")
    missing = [k for k in ("model_name", "model_path") if not raw.get(k)]
    if missing:
        raise GPUStackSpecError(f"{where}: missing {missing}; the article's keys map as {mapping}")
    engine = str(raw.get("engine", "vllm"))
    backend = BACKENDS.get(engine.lower())
    if backend is None:
        raise GPUStackSpecError(f"{where}: engine {engine!r} is not one of {sorted(BACKENDS)}; fix: engine: vllm")
    extra = raw.get("engine_extra_args") or []
    if isinstance(extra, str):
        extra = extra.split()
    if not isinstance(extra, list):
        raise GPUStackSpecError(f"{where}: engine_extra_args must be a list of flags, e.g. [--dspark-enabled, ...]")
    parameters = [str(a) for a in extra]
    if raw.get("torch_dtype"):
        parameters.insert(0, f"--dtype={raw['torch_dtype']}")
    replicas = raw.get("replicas", 1)
    if not isinstance(replicas, int) or replicas < 1:
        raise GPUStackSpecError(f"{where}: replicas {replicas!r} is not an integer >= 1")
    return ArticleModel(str(raw["model_name"]), str(raw["model_path"]), backend, tuple(parameters), replicas)


def parse_settings(raw: Any) -> GPUStackSettings:
    """The ``gpustack:`` section of a run config; every problem names the key and its fix."""
    if not isinstance(raw, dict):
        raise GPUStackSpecError("setting 'gpustack': expected a mapping with at least url; fix: gpustack: {url: http://host}")
    unknown = sorted(set(raw) - set(_SETTING_KEYS))
    if unknown:
        known = "; ".join(f"{k}: {v}" for k, v in _SETTING_KEYS.items())
        raise GPUStackSpecError(f"setting 'gpustack': unknown key(s) {unknown}; known keys: {known}")
    if not raw.get("url") or not re.match(r"^https?://", str(raw["url"])):
        raise GPUStackSpecError("setting 'gpustack.url': give the server's URL, e.g. http://gpustack.example:80")
    values: dict[str, Any] = {k: v for k, v in raw.items() if k != "article_model"}
    values["url"] = str(raw["url"]).rstrip("/")
    if raw.get("article_model"):
        article = read_article_model(raw["article_model"])
        values["article_model"] = article
        values.setdefault("model_path", article.local_path)
        values.setdefault("replicas", article.replicas)
    if not values.get("model_path") and not values.get("huggingface_repo_id"):
        raise GPUStackSpecError(
            "setting 'gpustack': no model; fix: give model_path (a folder on the workers), huggingface_repo_id, "
            "or article_model (the article's YAML)"
        )
    for key, low in (("replicas", 1), ("ready_timeout_s", 0), ("poll_interval_s", 0)):
        if key in values and (not isinstance(values[key], int | float) or values[key] < low):
            raise GPUStackSpecError(f"setting 'gpustack.{key}': {values[key]!r} is not a number >= {low}")
    if values.get("cluster_id") is not None and not isinstance(values["cluster_id"], int):
        raise GPUStackSpecError(f"setting 'gpustack.cluster_id': {values['cluster_id']!r} is not an integer id")
    fields_by_arm = values.get("model_fields") or {}
    if not isinstance(fields_by_arm, dict) or not all(isinstance(v, dict) for v in fields_by_arm.values()):
        raise GPUStackSpecError("setting 'gpustack.model_fields': write {arm: {field: value}}")
    return replace(GPUStackSettings(url=values["url"]), **values)


def model_name(settings: GPUStackSettings, arm: str) -> str:
    """<prefix>-<arm>; with the article's YAML, its model_name for dspark and <model_name>-<arm> for the rest.

    GPUStack model names are lowercase DNS-style labels.
    """
    article = settings.article_model
    if article is None:
        raw = f"{settings.name_prefix}-{arm}"
    else:
        raw = article.name if arm == "dspark" else f"{article.name}-{arm}"
    return re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")


def model_body(settings: GPUStackSettings, arm: str, flags: list[str], cluster_id: int) -> dict[str, Any]:
    """The ``POST /v2/models`` body for one arm: the arm's server flags become backend_parameters."""
    article = settings.article_model
    body: dict[str, Any] = {
        "name": model_name(settings, arm),
        "backend": article.backend if article else "vLLM",
        "backend_parameters": list(flags),
        "replicas": settings.replicas,
        "cluster_id": cluster_id,
        "enable_model_route": True,
    }
    if settings.model_path:
        body.update(source="local_path", local_path=settings.model_path)
    else:
        body.update(source="huggingface", huggingface_repo_id=settings.huggingface_repo_id)
    if settings.gpu_selector:
        body["gpu_selector"] = settings.gpu_selector
    if settings.backend_version:
        body["backend_version"] = settings.backend_version
    body.update(settings.model_fields.get(arm, {}))
    return body


def arm_flags(settings: GPUStackSettings, arm: str, common: list[str], arm_args: list[str]) -> list[str]:
    """Flags for one arm: the run's common flags, then the arm's; the article's YAML supplies dspark's own."""
    article = settings.article_model
    if article is not None and arm == "dspark":
        return list(article.backend_parameters)
    if article is not None:  # the other arms run the same model the article's way, less its DSpark flags
        dtype = [p for p in article.backend_parameters if p.startswith("--dtype=")]
        return [*dtype, *arm_args]
    return [*common, *arm_args]


def _flag_names(flags: list[str]) -> list[str]:
    return [f.split("=", 1)[0] for f in flags if f.startswith("--")]


def flags_missing_from_log(log: str, flags: list[str]) -> list[str]:
    """The arm's flags that the instance log does not show the engine running with.

    A flag counts as present when the log shows it verbatim (a launcher that prints its argv, as
    dspark-serve does) or as vLLM's "non-default args" key (``--enable-prefix-caching`` ->
    ``enable_prefix_caching``). The article's first troubleshooting step: check the real argv.
    """
    missing = []
    for name in _flag_names(flags):
        key = name.removeprefix("--").replace("-", "_")
        if name in log or re.search(rf"['\"]{re.escape(key)}['\"]\s*:", log):
            continue
        if name.startswith("--no-") and re.search(rf"['\"]{re.escape(key.removeprefix('no_'))}['\"]\s*:\s*False", log):
            continue
        missing.append(name)
    return missing


def engine_rejected(log: str) -> str | None:
    """The engine's own refusal of a flag, if the log shows one (stock vLLM given the article's flags)."""
    match = re.search(r"(error: unrecognized arguments:[^\n]*|dspark-serve: error:[^\n]*)", log)
    return match.group(1).strip() if match else None
