"""Real vLLM servers shared by the integration tests (tests/integration/servers.py): each start costs 1-2 minutes
on two cores, so they are launched when collection ends and boot while the unit tests run.

They start compiled, as users run them: eager mode starts in half the time (48 s against 90 s to ready
on a 2-core AMD EPYC) but answers ~6x slower (18 tok/s at 1 user), which costs more than it saves.
"""

from __future__ import annotations

import pytest

from dspark_bench.loadtests.deploy.base import Endpoint
from tests.integration.servers import ServerPool, pool_of


@pytest.fixture(scope="session")
def server_pool(request) -> ServerPool:
    return pool_of(request.config)


@pytest.fixture(scope="session")
def stock_server(server_pool) -> Endpoint:
    """Stock vLLM with the embedded model, started once for every module that needs it."""
    return server_pool.ready("stock")["stock"]


@pytest.fixture(scope="module")
def dspark_servers(server_pool, stock_server) -> dict[str, Endpoint]:
    """test_dspark's five dspark-serve servers and the stock one, by arm; the five stop when the module ends."""
    try:
        yield {"stock": stock_server, **server_pool.ready("dspark")}
    finally:
        server_pool.stop("dspark")
