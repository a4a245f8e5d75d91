"""``dspark-serve`` / ``python -m dspark_serve.serve``: vLLM's OpenAI server plus the article's flags.

    dspark-serve [serve] MODEL_DIR | --model DIR  --dspark-enabled --response-format json --enable-prefix-caching \\
        [--dspark-speculative-length 5] [--dspark-schema-compile SCHEMA_DIR | --no-dspark-schema-compile]
        [--dspark-drafter auto|native|draft-model|structure|ngram|replay|off] [--dspark-draft-model DIR]
        [--no-dspark-repeat-drafts] [--no-dspark-grammar-drafts] [--no-dspark-draft-handoff]
        [--no-dspark-acceptance-cap] [--no-dspark-governor] [--no-dspark-uniform-drafts]
        [--no-dspark-structure-lookahead] [--no-dspark-full-graphs]

Every other argument goes to vLLM unchanged. ``--dspark-enabled=false`` (or ``--dspark-enabled false``,
``--no-dspark-enabled``) serves stock vLLM. What ``--dspark-enabled`` turns on:
- speculation, verified by the target model so output does not change, from the best drafter this
  model and machine allow (``--dspark-drafter auto``): vLLM's native ``dspark`` method on a GPU with
  a checkpoint that ships DSpark draft weights; else the small draft model the checkpoint names in
  ``dspark.json`` (or ``--dspark-draft-model DIR``); else, for any model, JSON structure memory plus
  values copied from the prompt (``dspark_serve.drafter``). Up to ``--dspark-speculative-length``
  tokens per step, fewer as batches grow (compute-bound verification would cost throughput);
- ``--response-format json``: requests without ``response_format`` are constrained to JSON;
- prefix caching on; on the CPU 32-token KV blocks unless ``--block-size`` is given (vLLM's CPU
  default of 128 never shares a prompt prefix shorter than that);
- ``--dspark-schema-compile DIR``: every schema in DIR is compiled into vLLM's grammar cache at
  start-up, before the first user request needs it.
``--dspark-drafter replay`` drafts what the server answered before after the same context
(``dspark_serve.replay``): free drafts for repeated prompts, and, once a benchmark's prompts
have been answered, the ceiling of any drafter. Each mechanism switches off on its own: ``--dspark-drafter off``, ``--response-format none``,
``--no-dspark-schema-compile``, and each engine feature by its own flag (``--no-dspark-repeat-drafts``, or
``DSPARK_REPEAT_DRAFTS=0`` in the environment; a flag wins). A status line is logged at start-up, and served at
``GET /dspark/status``.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import shlex
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from dspark_serve import SUPPORTED_VLLM, VersionError, installed_vllm, require_supported_vllm
from dspark_serve.engine_config import (
    BUDGET_ENV,
    DEFAULT_VERIFY_BUDGET,
    SWITCHES,
    EngineConfig,
    SwitchError,
    switches,
)
from dspark_serve.flags import DSparkOptions, FlagError, parse
from dspark_serve.state import ASYNC_CAP_HOW, SCHEMA_STATE_FILE, STATE_DIR_ENV, STATUS_ENV

NGRAM_LOOKUP = {"prompt_lookup_max": 5, "prompt_lookup_min": 2}
DRAFT_MODEL_SIDECAR = "dspark.json"  # a checkpoint names its draft model here: {"draft_model": "../x-draft"}
STRUCTURE_DRAFTER = "dspark_serve.drafter.JsonDrafter"
REPLAY_DRAFTER = "dspark_serve.replay.ReplayDrafter"


@dataclass(frozen=True)
class Drafter:
    """Where draft tokens come from; the target model verifies them all, so output does not change."""

    method: str  # "dspark" | "dflash" | "draft_model" | "structure" | "ngram" | "ngram_gpu" | "replay" | "off"
    reason: str
    draft_model: str | None = None
    block: int | None = None  # dflash: the block the drafter was trained with (next token + drafts)

    def longest(self) -> int:
        """Drafts per step when the user names no length. The speculation gate verifies, request by request,
        as many of them as pay by the acceptance and step costs it measures, so this is an upper bound: a
        block drafter's whole block (one pass drafts it all), a cheap prompt lookup's more, and one forward
        pass per draft (a draft model, the engine-process drafters) the article's 5."""
        if self.method == "dflash" and self.block:
            return self.block - 1
        return {"ngram": 8, "ngram_gpu": 8, "dspark": 8}.get(self.method, 5)

    def speculative_config(self, length: int | None, budget: int | None = None) -> dict | None:
        length = length or self.longest()
        if self.method == "off":
            return None
        if self.method in ("structure", "replay"):
            # These drafters shorten their own drafts under load (dspark_serve.drafter.draft_length).
            drafter = STRUCTURE_DRAFTER if self.method == "structure" else REPLAY_DRAFTER
            return {"method": "custom_class", "model": drafter, "num_speculative_tokens": length}
        # A block drafter always drafts the block it was trained with (a shorter block changes what each mask
        # slot attends to); the user's length and the load cap how many of those drafts are verified.
        drafted = self.block - 1 if self.method == "dflash" and self.block else length
        config: dict = {"method": self.method, "num_speculative_tokens": drafted}
        if self.method in ("ngram", "ngram_gpu"):
            config.update(NGRAM_LOOKUP)
        if self.method in ("draft_model", "dflash"):
            config["model"] = self.draft_model
        if self.method == "dflash":
            # vLLM gives every drafter that reads the target's hidden states EAGLE's prefix-cache rule: drop
            # the last matched block, because an EAGLE draft at position p reads the hidden state of p - 1.
            # The one-pass drafter's context at p is the target's state at p itself (vLLM's dflash.py copies
            # the target's positions), so a cached block holds all it needs; keeping the block keeps a
            # shared system prompt's hit (order_extraction: 24% of prompt tokens at 32-token blocks, 0 with
            # the drop). Drafts only: the target verifies every one.
            config["disable_eagle_block_drop"] = True
        if self.method in ("ngram", "ngram_gpu", "draft_model", "dflash"):
            config["num_speculative_tokens_per_batch_size"] = load_aware_schedule(min(length, drafted), budget=budget)
        return config


def load_aware_schedule(length: int, largest_batch: int = 1024, budget: int | None = None) -> list[list[int]]:
    """vLLM's dynamic speculative decoding ranges [first, last, k]: fewer drafts as batches grow."""
    from dspark_serve.drafter import VERIFY_BUDGET, draft_length

    ranges: list[list[int]] = []
    for batch in range(1, largest_batch + 1):
        k = draft_length(length, batch, budget or VERIFY_BUDGET)
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = batch
        else:
            ranges.append([batch, batch, k])
    return ranges


def has_native_dspark_weights(model_dir: str | None) -> bool:
    """A checkpoint that ships DSpark draft weights says so in its config (DeepSeek-V4.x / Qwen3 DSpark)."""
    if not model_dir:
        return False
    config = Path(model_dir) / "config.json"
    if not config.is_file():
        return False
    data = json.loads(config.read_text(encoding="utf-8"))
    return bool(
        data.get("dspark_config") or data.get("dspark") or any("dspark" in str(a).lower() for a in data.get("architectures", []))
    )


def shipped_draft_model(model_dir: str | None) -> str | None:
    """The draft model a checkpoint names in its ``dspark.json`` sidecar (path relative to the checkpoint)."""
    if not model_dir or not (Path(model_dir) / DRAFT_MODEL_SIDECAR).is_file():
        return None
    sidecar = Path(model_dir) / DRAFT_MODEL_SIDECAR
    try:
        named = json.loads(sidecar.read_text(encoding="utf-8"))["draft_model"]
    except (ValueError, KeyError, TypeError) as exc:
        raise FlagError(f'{sidecar}: not {{"draft_model": "DIR"}} ({exc}); fix: correct or delete the file') from None
    path = (Path(model_dir) / named).resolve()
    if not (path / "config.json").is_file():
        raise FlagError(f"{sidecar} names {named!r}, but there is no model at {path}; fix: correct or delete the file")
    return str(path)


def block_drafter_size(draft_dir: str) -> int | None:
    """For a one-pass block drafter (vLLM's ``DFlashDraftModel``: all drafts in one forward pass over the
    target's hidden states) the block it was trained with, 0 when its config does not say; None for an
    ordinary draft model."""
    config_file = Path(draft_dir) / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise FlagError(f"{config_file}: not JSON ({exc}); fix: point at a model folder with a valid config.json") from None
    if "DFlashDraftModel" not in config.get("architectures", []):
        return None
    return int(config.get("block_size") or 0)


def select_drafter(model_dir: str | None, gpu: bool, choice: str = "auto", draft_model: Path | None = None) -> Drafter:
    """The drafter for ``--dspark-drafter choice`` (auto: the best one this model and machine allow)."""
    native = gpu and has_native_dspark_weights(model_dir)
    draft = str(draft_model.resolve()) if draft_model else shipped_draft_model(model_dir)
    if choice == "native" and not native:
        raise FlagError("--dspark-drafter native needs a GPU and a checkpoint with DSpark draft weights; fix: use auto")
    if choice == "draft-model" and not draft:
        raise FlagError(
            f"--dspark-drafter draft-model needs a draft model; fix: add --dspark-draft-model DIR or a {DRAFT_MODEL_SIDECAR}"
        )
    if choice in ("native", "auto") and native:
        return Drafter("dspark", "GPU and a checkpoint with DSpark draft weights: vLLM's native dspark method")
    if choice in ("draft-model", "auto") and draft:
        source = "--dspark-draft-model" if draft_model else f"named by the checkpoint's {DRAFT_MODEL_SIDECAR}"
        if (block := block_drafter_size(draft)) is not None:
            why = f"one-pass block drafter {Path(draft).name} ({source}): every draft in one forward pass (vLLM's dflash)"
            return Drafter("dflash", f"{why}, fewer drafts under load", draft, block or None)
        return Drafter("draft_model", f"small draft model {Path(draft).name} ({source}), fewer drafts under load", draft)
    if choice == "ngram":
        if gpu:
            return Drafter("ngram_gpu", "prompt-copy drafts only (vLLM's ngram_gpu, asynchronous scheduling), fewer drafts under load")
        return Drafter("ngram", "prompt-copy drafts only (vLLM's ngram), fewer drafts under load")
    if choice == "replay":
        return Drafter("replay", "replays this server's earlier answers after the same context, fewer drafts under load")
    if choice == "off":
        return Drafter("off", "speculation switched off (--dspark-drafter off)")
    if gpu and choice == "auto":
        # The engine-process drafters (custom_class) make vLLM schedule synchronously, which on a GPU costs
        # more than their drafts gain under load; the GPU prompt lookup keeps asynchronous scheduling.
        return Drafter(
            "ngram_gpu",
            "GPU, no DSpark weights and no draft model: prompt-copy drafts on the GPU (vLLM's ngram_gpu), asynchronous "
            "scheduling kept; --dspark-drafter structure for JSON structure memory under synchronous scheduling",
        )
    why = "chosen" if choice == "structure" else ("no GPU" if not gpu else "no DSpark weights") + " and no draft model"
    return Drafter("structure", f"{why}: JSON structure memory + prompt copy (dspark_serve.drafter), fewer drafts under load")


def _is_speculative_config(arg: str) -> bool:
    """Every spelling vLLM's parser takes: --speculative-config[=..], --speculative_config, the dotted
    --speculative-config.method, and -sc."""
    name = arg.split("=", 1)[0]
    return name == "-sc" or name.replace("_", "-").split(".", 1)[0] == "--speculative-config"


def precompile_target(argv: list[str], environ: dict[str, str]) -> tuple[str, dict[str, str]]:
    """Where the launcher's schema precompile reaches the server it started: the host it binds (loopback
    when it binds every interface), its port, and its API key (--api-key, else VLLM_API_KEY)."""
    host = _arg_value(argv, "--host") or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    port = _arg_value(argv, "--port") or "8000"
    key = _arg_value(argv, "--api-key") or environ.get("VLLM_API_KEY")
    return f"http://{host}:{port}", ({"Authorization": f"Bearer {key}"} if key else {})


def compilation_setting(argv: list[str], key: str) -> object | None:
    """One setting of vLLM's compilation config as the argv gives it, in any of its parser's spellings: a
    --compilation-config (or -cc) JSON, or the dotted --compilation-config.KEY; None if not given."""
    dotted = ("--compilation-config." + key.replace("_", "-"), "-cc." + key.replace("_", "-"))
    for i, arg in enumerate(argv):
        name, _, inline = arg.partition("=")
        name = name.replace("_", "-")
        value = inline if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
        if name in ("--compilation-config", "-cc"):
            try:
                config = json.loads(value)
            except ValueError:
                continue  # not JSON: vLLM's own parser says what is wrong with it
            if isinstance(config, dict) and config.get(key) is not None:
                return config[key]
        elif name in dotted and value:
            return value
    return None


def cudagraph_mode_asked(argv: list[str]) -> str | None:
    """The ``cudagraph_mode`` vLLM's argv asks for, upper-cased; None if none."""
    mode = compilation_setting(argv, "cudagraph_mode")
    return None if mode is None else str(mode).upper()


# The most tokens vLLM 0.32 captures a CUDA graph for when not told (VllmConfig._set_cudagraph_sizes): 512, and
# 1024 on a GPU of compute capability 10.x. A step of more tokens runs without graphs.
GRAPH_TOKENS = 512
GRAPH_TOKENS_CC10 = 1024


def graph_range_asked(vllm_argv: list[str]) -> tuple[object | None, object | None]:
    """How far the argv has vLLM capture CUDA graphs: (the largest size, the sizes), each None if not given."""
    given = _arg_value(vllm_argv, "--max-cudagraph-capture-size") or compilation_setting(vllm_argv, "max_cudagraph_capture_size")
    return given, compilation_setting(vllm_argv, "cudagraph_capture_sizes")


def cuda_graph_tokens(vllm_argv: list[str], capability: tuple[int, int] | None) -> int | None:
    """The most tokens a step of this server may hold and still replay a captured CUDA graph; None where it
    captures none (no GPU: ``capability`` None; --enforce-eager; -O0; cudagraph_mode NONE). Pure."""
    if capability is None or "--enforce-eager" in vllm_argv or "-O0" in vllm_argv or _arg_value(vllm_argv, "-O") == "0":
        return None
    if cudagraph_mode_asked(vllm_argv) == "NONE":
        return None
    given, sizes = graph_range_asked(vllm_argv)
    try:
        if given is not None:
            return int(str(given))
        if isinstance(sizes, list) and sizes:
            return max(int(size) for size in sizes)
    except ValueError:
        return None  # vLLM's own parser says what is wrong with it
    return GRAPH_TOKENS_CC10 if capability[0] == 10 else GRAPH_TOKENS


# Graph room beside a full verification step for the prompt tokens a step also carries: with DSpark's budget at
# the largest graph, a step that also prefilled a new request's prompt (about 130 tokens on order_extraction) ran
# without graphs: 271 of dspark-ngram's logged steps at 64 users on an H100, 676 tokens at the median
# (benchmarks/gpu/h100-s57-lookahead). Speculating on a GPU, dspark-serve captures graphs up to the budget plus
# this (1024 tokens by default, vLLM's own ceiling on compute capability 10.x), unless the argv sets the range.
PREFILL_ROOM = 512


# cudagraph_mode FULL (a full graph for every batch, mixed ones too) broke dspark-serve's answers on vLLM 0.32's
# GPU runner while it speculated: on an H100, 130 of 807 answers equal to stock's, 316 of 320 not valid at 64 users
# (benchmarks/gpu/h100-s55-fullgraph-probe; the peer with the same mode and no dynamic draft length: all equal).
UNSAFE_CUDAGRAPH_MODES = ("FULL",)


def _arg_value(argv: list[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def verify_budget(environ: dict[str, str], graph_tokens: int | None = None) -> tuple[int, str]:
    """Token positions one verification step may hold before drafts shrink (vLLM's load-aware length), and
    why: ``DSPARK_VERIFY_BUDGET`` if set; else, on a GPU, the largest step vLLM replays a CUDA graph for
    (``graph_tokens``, from ``cuda_graph_tokens``): a step past it runs without graphs, where a launch-bound
    step costs far more than its positions (stock vLLM on piecewise graphs alone served 15-36% less on an
    H100, benchmarks/gpu/h100-s55-fullgraph-probe); else a bound wide enough (12 drafts a request up to 78
    running requests) that what decides is the speculation gate's step costs, measured on the machine while
    it serves, not a rule by CPU flag (benchmarks/dspark/budget-measured/)."""
    if BUDGET_ENV in environ:
        try:
            value = int(environ[BUDGET_ENV])
        except ValueError:
            value = 0
        if value < 1:
            raise FlagError(f"{BUDGET_ENV}={environ[BUDGET_ENV]!r} is not a positive integer; fix: e.g. {BUDGET_ENV}=64, or unset it")
        return value, f"{BUDGET_ENV}={value}"
    if graph_tokens is not None:
        return graph_tokens, f"the largest step vLLM replays a CUDA graph for here ({graph_tokens} tokens); {BUDGET_ENV} sets another"
    return DEFAULT_VERIFY_BUDGET, "default: the measured step costs decide"


def _gpu_present() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def _gpu_capability() -> tuple[int, int]:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return int(major), int(minor)


CPU_BLOCK_SIZE = 32
CPU_KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
CPU_KV_CACHE_GIB = "2"  # what the harness gives every local CPU arm (dspark_bench.loadtests.deploy.local)


def default_cpu_kv_cache(environ: dict[str, str], vllm_argv: list[str], gpu: bool) -> str | None:
    """The KV cache size (GiB) to set on a CPU when the user gave none. vLLM CPU otherwise sizes it from
    ``--gpu-memory-utilization`` and refuses to start unless 92% of the node's memory is free, which a
    full page cache (after any large file read) prevents."""
    if gpu or CPU_KV_CACHE_ENV in environ or _arg_value(vllm_argv, "--kv-cache-memory-bytes"):
        return None
    return CPU_KV_CACHE_GIB


def startup_failure(exc: BaseException) -> str:
    """One line for a server that did not start: what failed and what to change."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    if "memory" in text.lower():
        fix = f"give the KV cache a size that fits ({CPU_KV_CACHE_ENV}=GiB on a CPU, --gpu-memory-utilization on a GPU)"
    elif "Engine core initialization failed" in text:
        fix = "the engine's own error is in the lines above (a model folder, a flag or memory); correct it and start again"
    else:
        fix = "the traceback above names the cause; correct it and start again"
    return f"dspark-serve: error: vLLM did not start ({text}); fix: {fix}"


# Of the speculative methods dspark-serve chooses, those vLLM 0.32 schedules asynchronously on a GPU unless
# told not to (its VllmConfig; ngram and custom_class it does not), and the flag that tells it. The acceptance
# cap acts on both paths, by different hooks (speculation_gate); the status says which.
ASYNC_SPEC_METHODS = ("dflash", "dspark", "draft_model", "ngram_gpu")
NO_ASYNC_FLAG = "--no-async-scheduling"
ASYNC_CAP = f"active (asynchronous scheduling: {ASYNC_CAP_HOW})"


def acceptance_cap(method: str | None, gpu: bool, argv: list[str], switched_on: bool = True, by: str = "") -> str:
    """Whether the per-request acceptance cap will act, and on which of vLLM's scheduling paths, in words. Pure."""
    if not method:
        return "off (no speculation)"
    if not switched_on:
        return f"off ({by or SWITCHES['acceptance_cap'] + '=0'})"
    if gpu and method in ASYNC_SPEC_METHODS and NO_ASYNC_FLAG not in argv:
        return ASYNC_CAP
    return "active"


def build(
    options: DSparkOptions,
    vllm_argv: list[str],
    gpu: bool,
    budget: tuple[int, str] | None = None,
    environ: dict[str, str] | None = None,
    graph_tokens: int | None = None,
) -> tuple[list[str], dict]:
    """The vLLM argv and the status facts for ``options``. Pure apart from reading the model's config.
    ``budget``: (verified positions per step, why), from ``verify_budget``; None: the default. ``environ``:
    the server's environment (the engine plugin's switches). ``graph_tokens``: the largest step vLLM would
    capture a CUDA graph for (``cuda_graph_tokens``; None: no graphs)."""
    if not options.enabled:
        return vllm_argv, {"enabled": False}
    if budget is None:
        budget = verify_budget({})
    drafter = select_drafter(_arg_value(vllm_argv, "--model"), gpu, options.drafter, options.draft_model)
    argv = list(vllm_argv)
    if given := [a for a in argv if _is_speculative_config(a)]:
        raise FlagError(f"--dspark-enabled chooses the speculative config itself; fix: drop {given[0].split('=', 1)[0]}")
    speculative = drafter.speculative_config(options.speculative_length, budget[0])
    if speculative and (mode := cudagraph_mode_asked(argv)) in UNSAFE_CUDAGRAPH_MODES:
        raise FlagError(
            f"cudagraph_mode {mode} gives wrong answers under dspark-serve's speculation on vLLM {SUPPORTED_VLLM} "
            "(benchmarks/gpu/h100-s55-fullgraph-probe); fix: drop it from --compilation-config (vLLM's default, "
            "FULL_AND_PIECEWISE, runs decode steps on full graphs), or --dspark-drafter off"
        )
    switched = {**switches(environ or {}), **options.features}  # a flag wins over the environment
    if speculative:
        argv += ["--speculative-config", json.dumps(speculative)]
    graph_ceiling = None
    if speculative and graph_tokens is not None and graph_range_asked(argv) == (None, None):
        graph_ceiling = max(graph_tokens, budget[0]) + PREFILL_ROOM
        argv += ["--max-cudagraph-capture-size", str(graph_ceiling)]
    # JSON stays uncompacted: vLLM's disable_any_whitespace covers json_object too, where xgrammar 0.2.8
    # demands ", " after a comma (mlc-ai/xgrammar#945) and rejects this model's compact '","' token.
    if "--enable-prefix-caching" not in argv:
        argv.append("--enable-prefix-caching")
    # vLLM's CPU backend caches in 128-token blocks: a shared instruction shorter than that is never
    # reused (hit rate 0.0 on this project's prompts). 32 (the backend wants multiples of 32) lets the
    # cache DSpark requires work; measured in benchmarks/dspark/block-size/. An explicit --block-size wins.
    block_size = _arg_value(argv, "--block-size")
    if block_size is None and not gpu:
        block_size = str(CPU_BLOCK_SIZE)
        argv += ["--block-size", block_size]
    argv += ["--middleware", "dspark_serve.middleware.DSparkMiddleware"]
    schemas = sorted(options.schema_dir.glob("*.json")) if options.schema_dir and options.schema_compile else []
    facts = {
        "enabled": True,
        "model": _arg_value(argv, "--model"),  # the middleware compiles request schemas with its tokenizer
        "drafter": drafter.method,
        "drafter_reason": drafter.reason,
        "draft_model": drafter.draft_model,
        "speculative_length": options.speculative_length or drafter.longest(),
        "speculative_length_from": "--dspark-speculative-length" if options.speculative_length else "the drafter's longest; the gate verifies what pays",
        "verify_budget": budget[0],
        "verify_budget_reason": budget[1],
        "graph_ceiling": graph_ceiling,  # CUDA graphs captured up to this many tokens a step (None: vLLM's choice)
        "response_format": options.response_format,
        "prefix_caching": True,
        "block_size": int(block_size) if block_size else None,
        "schema_dir": str(options.schema_dir) if options.schema_dir else None,
        "schemas": len(schemas),
        "vllm": installed_vllm(),
        "engine_plugin": engine_plugin_registered(),
        "acceptance_cap": acceptance_cap(
            speculative.get("method") if speculative else None, gpu, argv, switched["acceptance_cap"],
            "--no-dspark-acceptance-cap" if "acceptance_cap" in options.features else "",
        ),
        "switches": switched,  # the engine features on and off (engine_config.SWITCHES)
    }
    return argv, facts


def status_line(facts: dict) -> str:
    if not facts.get("enabled"):
        return "DSpark: off (stock vLLM)"
    default = "JSON (json_object) unless the request says otherwise" if facts["response_format"] == "json" else "none"
    schemas = (
        f"{facts['schemas']} schema(s) from {facts['schema_dir']} compiled at start-up"
        if facts["schemas"]
        else "no schemas precompiled"
    )
    blocks = f" ({facts['block_size']}-token blocks)" if facts.get("block_size") else ""
    counter = (
        "grammar-forced tokens counted"
        if facts.get("engine_plugin", True)
        else "grammar-forced tokens NOT counted (engine plugin not registered; fix: pip install ./engine (dspark-serve) in this environment)"
    )
    graphs = (
        f", CUDA graphs up to {facts['graph_ceiling']} tokens a step (room for a prompt beside a full verification)"
        if facts.get("graph_ceiling")
        else ""
    )
    return (
        f"DSpark: on; drafter {facts['drafter']} ({facts['drafter_reason']}), up to {facts['speculative_length']} "
        f"draft tokens, fewer past {facts.get('verify_budget', '?')} verified positions per step "
        f"({facts.get('verify_budget_reason', 'default')}){graphs}; default response format {default}; prefix caching "
        f"on{blocks}; {schemas}; {counter}; acceptance cap {facts.get('acceptance_cap', 'active')}"
    )


def engine_plugin_registered() -> bool:
    """Whether vLLM will load dspark_serve.engine_plugin (its ``vllm.general_plugins`` entry point)."""
    return any(ep.value.startswith("dspark_serve.engine_plugin") for ep in metadata.entry_points(group="vllm.general_plugins"))


def _precompile(base_url: str, headers: dict[str, str], model: str, schemas: list[Path], state_file: Path) -> None:
    """Compile each schema into vLLM's grammar cache with a 1-token request once the server is up."""
    import httpx

    deadline = time.time() + 1800
    while time.time() < deadline:
        try:
            if httpx.get(f"{base_url}/health", headers=headers, timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(1)
    done, failed = 0, []
    for path in schemas:
        try:
            schema = json.loads(path.read_text(encoding="utf-8"))
            body = {
                "model": model,
                "messages": [{"role": "user", "content": "{}"}],
                "max_tokens": 1,
                "response_format": {"type": "json_schema", "json_schema": {"name": path.stem, "schema": schema}},
            }
            httpx.post(f"{base_url}/v1/chat/completions", json=body, headers=headers, timeout=120).raise_for_status()
            done += 1
        except (ValueError, httpx.HTTPError) as exc:
            failed.append(f"{path.name}: {exc}")
        state_file.write_text(json.dumps({"schemas_compiled": done, "schemas_failed": failed}), encoding="utf-8")
    print(
        f"DSpark: {done}/{len(schemas)} schema(s) compiled into the grammar cache" + (f"; failed: {failed}" if failed else ""),
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    try:
        options, vllm_argv = parse(argv)
        require_supported_vllm(installed_vllm())
        gpu = _gpu_present()
        graph_tokens = cuda_graph_tokens(vllm_argv, _gpu_capability() if gpu else None)
        budget = verify_budget(dict(os.environ), graph_tokens)
        final_argv, facts = build(options, vllm_argv, gpu, budget, dict(os.environ), graph_tokens)
    except (FlagError, VersionError, SwitchError) as exc:
        print(f"dspark-serve: error: {exc}", file=sys.stderr)
        return 2
    # The argv first, as the engine really got it: GPUStack's instance log is where users check it.
    print(f"dspark-serve argv: {shlex.join(argv)}", flush=True)
    print(status_line(facts), flush=True)
    os.environ[STATUS_ENV] = json.dumps(facts)
    if facts.get("enabled"):
        # Live state the engine process and the API server share (grammar-forced counts, schemas compiled).
        state_dir = tempfile.mkdtemp(prefix="dspark-")
        atexit.register(shutil.rmtree, state_dir, ignore_errors=True)
        os.environ[STATE_DIR_ENV] = state_dir
        # The engine processes' one configuration (the drafters of the engine process shorten drafts by the
        # same budget).
        os.environ.update(EngineConfig(facts["drafter"], state_dir, facts["verify_budget"], **facts["switches"]).to_env())
    if facts.get("schemas"):
        state = Path(os.environ[STATE_DIR_ENV]) / SCHEMA_STATE_FILE
        base_url, headers = precompile_target(final_argv, dict(os.environ))
        model = _arg_value(final_argv, "--served-model-name") or _arg_value(final_argv, "--model") or ""
        schemas = sorted(options.schema_dir.glob("*.json"))  # type: ignore[union-attr]
        threading.Thread(target=_precompile, args=(base_url, headers, model, schemas, state), daemon=True).start()
    if kv_cache := default_cpu_kv_cache(dict(os.environ), final_argv, gpu):
        os.environ[CPU_KV_CACHE_ENV] = kv_cache
        print(f"dspark-serve: {CPU_KV_CACHE_ENV}={kv_cache} (GiB of KV cache; set it to choose another size)", flush=True)
    sys.argv = ["vllm-openai-server", *final_argv]
    try:
        runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        import traceback

        traceback.print_exc()
        print(startup_failure(exc), file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
