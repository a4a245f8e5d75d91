"""The real vLLM servers the integration tests share, launched when collection ends.

Each vLLM start costs 1-2 minutes of CPU on two cores (importing torch and vLLM in three processes, compiling
the model). The unit tests that run first mostly wait on their fakes, so the servers boot beside them and a
fixture then only waits for ``/health`` (tests/conftest.py runs the tests without the ``integration`` mark
first). Only the groups the selected tests need are launched: ``make test-quick`` starts none.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from dspark_bench.loadtests.config import DEFAULT_MODEL, load_config
from dspark_bench.loadtests.deploy.base import Endpoint, ServerSpec
from dspark_bench.loadtests.deploy.local import LocalDeployer, cpu_server_env
from dspark_bench.loadtests.deploy.servers import common_server_args, vllm_launcher
from dspark_serve.engine_config import SWITCHES

TEST_SERVER_ARGS: tuple[str, ...] = tuple(common_server_args(load_config()))
CPU_ASYNC = Path(__file__).resolve().parent / "cpu_async"  # vLLM's asynchronous scheduling, kept on on a CPU
ARTICLE_FLAGS = ["--dspark-enabled", "--response-format", "json", "--enable-prefix-caching", "--dspark-speculative-length", "5"]


def one_core_each(specs: list[ServerSpec]) -> list[ServerSpec]:
    """``specs`` with each server's OpenMP threads bound to a core of its own in turn. vLLM CPU's automatic
    binding puts every server's worker, and so its torch.compile, on the first core and keeps the last for
    the rest: servers started together compile one after another on one core while the other idles (five
    took 413 s on 2 cores). A benchmark's arms keep vLLM's binding: they serve one at a time, as users run them."""
    cores = sorted(os.sched_getaffinity(0))
    return [replace(spec, env={**spec.env, "VLLM_CPU_OMP_THREADS_BIND": str(cores[i % len(cores)])}) for i, spec in enumerate(specs)]


def _stock_specs(_scratch: Path) -> list[ServerSpec]:
    return [ServerSpec("stock", str(DEFAULT_MODEL), "tiny-json", vllm_launcher(), list(TEST_SERVER_ARGS), env=cpu_server_env())]


def _dspark_spec(name: str, flags: list[str], env: dict[str, str]) -> ServerSpec:
    return ServerSpec(
        name, str(DEFAULT_MODEL), "tiny-json", [sys.executable, "-m", "dspark_serve.serve"], list(TEST_SERVER_ARGS), flags, env
    )


def _dspark_specs(scratch: Path) -> list[ServerSpec]:
    """test_dspark's five: the shipped drafter, the structure drafter, a drafter that always misses, and the
    first and the last on vLLM's asynchronous path."""
    from studies.missing_drafter import write_missing_drafter

    env = {**cpu_server_env(), "VLLM_CPU_KVCACHE_SPACE": "1"}  # six servers share the machine; 1 GiB holds 87k tokens
    # A drafter whose drafts miss by construction (its weights redrawn at random): the workload where nothing
    # lands, for the speculation gate.
    missing_flags = [*ARTICLE_FLAGS, "--dspark-draft-model", str(write_missing_drafter(scratch / "missing-drafter"))]
    # vLLM's asynchronous scheduling, as vLLM runs these drafters on a GPU
    asynchronous = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(CPU_ASYNC), os.environ.get("PYTHONPATH")]))}
    return [
        _dspark_spec("dspark", ARTICLE_FLAGS, env),
        # The drafter for models that ship no draft model: structure memory + prompt copy; with the
        # speculation gate off, so that every draft (grammar drafts too) is verified on any machine.
        _dspark_spec("structure", [*ARTICLE_FLAGS, "--dspark-drafter", "structure"], {**env, SWITCHES["acceptance_cap"]: "0"}),
        _dspark_spec("missing", missing_flags, env),
        _dspark_spec("async", ARTICLE_FLAGS, asynchronous),
        _dspark_spec("missing-async", missing_flags, asynchronous),
    ]


# The fixtures that serve pooled servers, and the groups each needs (launched in this order).
GROUPS: dict[str, Callable[[Path], list[ServerSpec]]] = {"stock": _stock_specs, "dspark": _dspark_specs}
FIXTURE_GROUPS: dict[str, tuple[str, ...]] = {"stock_server": ("stock",), "dspark_servers": ("stock", "dspark")}


class ServerPool:
    """Launches groups of servers without waiting, hands them out once ready, stops them (also at exit)."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.deployer = LocalDeployer(scratch / "logs", startup_timeout_s=900)  # six boot together on 2 cores
        self.groups: dict[str, list[Endpoint]] = {}

    def launch(self, names: list[str]) -> None:
        """Launch the groups not yet launched, every server bound to a core in turn across all of them."""
        new = [name for name in dict.fromkeys(names) if name not in self.groups]
        specs = {name: GROUPS[name](self.scratch) for name in new}
        bound = iter(one_core_each([spec for group in specs.values() for spec in group]))
        for name, group in specs.items():
            self.groups[name] = [self.deployer.launch(next(bound)) for _ in group]

    def ready(self, name: str) -> dict[str, Endpoint]:
        """The group's servers by arm, once each answers ``/health`` (launched now if it was not)."""
        self.launch([name])
        for endpoint in self.groups[name]:
            self.deployer.wait_ready(endpoint)
        return {endpoint.arm: endpoint for endpoint in self.groups[name]}

    def stop(self, name: str) -> None:
        for endpoint in self.groups.pop(name, []):
            self.deployer.stop(endpoint)

    def stop_all(self) -> None:
        self.groups.clear()
        self.deployer.stop_all()


def run_order(item: pytest.Item) -> tuple[bool, int]:
    """Tests without the ``integration`` mark first, while the pooled servers boot. Of the integration tests:
    those with no vLLM server first, as the pool boots; then those of the largest pooled group, which stops
    after them; then the stock server's; then those that start vLLM servers of their own (``starts_servers``),
    once the largest group is gone: eight vLLM CPU servers at once, six pooled and test_cost_only's two, ran
    23.5 GiB out of memory."""
    pooled = max((len(FIXTURE_GROUPS[name]) for name in getattr(item, "fixturenames", ()) if name in FIXTURE_GROUPS), default=0)
    if item.get_closest_marker("starts_servers") is not None:
        phase = len(GROUPS) + 1
    else:
        phase = len(GROUPS) + 1 - pooled if pooled else 0
    return item.get_closest_marker("integration") is not None, phase


def groups_needed(fixturenames: list[list[str]]) -> list[str]:
    """The groups the selected tests' fixtures need, in launch order."""
    used = {name for names in fixturenames for name in names}
    return [group for group in GROUPS if any(group in FIXTURE_GROUPS[f] for f in used & FIXTURE_GROUPS.keys())]


POOL = pytest.StashKey[ServerPool]()


def launch_for(session: pytest.Session) -> None:
    """At collection's end: launch the groups the selected tests need, so they boot while other tests run."""
    if session.config.option.collectonly:
        return
    if groups := groups_needed([item.fixturenames for item in session.items if isinstance(item, pytest.Function)]):
        pool_of(session.config).launch(groups)


def pool_of(config: pytest.Config) -> ServerPool:
    """The session's pool (made on first use; stopped when the session ends)."""
    if POOL not in config.stash:
        # pytest's own tmp_path_factory, so the servers' logs sit with the session's other temporary folders
        config.stash[POOL] = ServerPool(config._tmp_path_factory.mktemp("servers"))  # type: ignore[attr-defined]
        config.add_cleanup(config.stash[POOL].stop_all)
    return config.stash[POOL]
