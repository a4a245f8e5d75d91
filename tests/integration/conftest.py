"""Real vLLM servers shared by the integration tests: each start costs 1-2 minutes on two cores.

They start compiled, as users run them: eager mode starts in half the time (48 s against 90 s to ready
on a 2-core AMD EPYC) but answers ~6x slower (18 tok/s at 1 user), which costs more than it saves.
"""

from __future__ import annotations

import pytest

from dspark_bench.loadtests.config import DEFAULT_MODEL, load_config
from dspark_bench.loadtests.deploy.base import Endpoint, ServerSpec
from dspark_bench.loadtests.deploy.local import LocalDeployer, cpu_server_env
from dspark_bench.loadtests.deploy.servers import common_server_args, vllm_launcher

TEST_SERVER_ARGS: tuple[str, ...] = tuple(common_server_args(load_config()))


@pytest.fixture(scope="session")
def stock_server(tmp_path_factory) -> Endpoint:
    """Stock vLLM with the embedded model, started once for every module that needs it."""
    deployer = LocalDeployer(tmp_path_factory.mktemp("stock-logs"), startup_timeout_s=600)
    spec = ServerSpec("stock", str(DEFAULT_MODEL), "tiny-json", vllm_launcher(), list(TEST_SERVER_ARGS), env=cpu_server_env())
    try:
        yield deployer.start(spec)
    finally:
        deployer.stop_all()
