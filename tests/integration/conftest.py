"""Real vLLM servers shared by the integration tests: each start costs 1-2 minutes on two cores.

They start compiled, as users run them: eager mode starts in half the time (48 s against 90 s to ready
on a 2-core AMD EPYC) but answers ~6x slower (18 tok/s at 1 user), which costs more than it saves.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from dspark_bench.loadtests.config import DEFAULT_MODEL, load_config
from dspark_bench.loadtests.deploy.base import Endpoint, ServerSpec
from dspark_bench.loadtests.deploy.local import LocalDeployer, cpu_server_env
from dspark_bench.loadtests.deploy.servers import common_server_args, vllm_launcher

TEST_SERVER_ARGS: tuple[str, ...] = tuple(common_server_args(load_config()))


def one_core_each(specs: list[ServerSpec]) -> list[ServerSpec]:
    """``specs`` with each server's OpenMP threads bound to a core of its own in turn. vLLM CPU's automatic
    binding puts every server's worker, and so its torch.compile, on the first core and keeps the last for
    the rest: servers started together compile one after another on one core while the other idles (five
    took 413 s on 2 cores). A benchmark's arms keep vLLM's binding: they serve one at a time, as users run them."""
    cores = sorted(os.sched_getaffinity(0))
    return [replace(spec, env={**spec.env, "VLLM_CPU_OMP_THREADS_BIND": str(cores[i % len(cores)])}) for i, spec in enumerate(specs)]


@pytest.fixture(scope="session")
def stock_server(tmp_path_factory) -> Endpoint:
    """Stock vLLM with the embedded model, started once for every module that needs it."""
    deployer = LocalDeployer(tmp_path_factory.mktemp("stock-logs"), startup_timeout_s=600)
    spec = ServerSpec("stock", str(DEFAULT_MODEL), "tiny-json", vllm_launcher(), list(TEST_SERVER_ARGS), env=cpu_server_env())
    try:
        yield deployer.start(spec)
    finally:
        deployer.stop_all()
