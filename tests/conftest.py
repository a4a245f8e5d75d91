import pytest
from gevent import monkey

monkey.patch_all()  # as Locust does, but before anything imports ssl


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests without the ``integration`` mark first, so the real servers the others need boot meanwhile
    (tests/integration/servers.py: run_order). The sort is stable: each module's tests stay together, in order."""
    from tests.integration.servers import run_order

    items.sort(key=run_order)


def pytest_collection_finish(session: pytest.Session) -> None:
    from tests.integration.servers import launch_for

    launch_for(session)


def start_fake_stream_server(*args: str):
    """tests/fake_stream_server.py on a free port, with ``args``: (its base URL, the process)."""
    import subprocess
    import sys
    from pathlib import Path

    from dspark_bench.loadtests.deploy.local import free_port

    port = free_port()
    script = Path(__file__).resolve().parent / "fake_stream_server.py"
    process = subprocess.Popen([sys.executable, str(script), "--port", str(port), *args], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    return f"http://127.0.0.1:{port}", process


@pytest.fixture(scope="module")
def fast_server():
    """A fast fake OpenAI streaming server (tests/fake_stream_server.py): never the bottleneck."""
    url, process = start_fake_stream_server()
    yield url
    process.kill()
    process.wait()
