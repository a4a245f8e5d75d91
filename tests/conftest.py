import pytest
from gevent import monkey

monkey.patch_all()  # as Locust does, but before anything imports ssl


@pytest.fixture(scope="module")
def fast_server():
    """A fast fake OpenAI streaming server (tests/fake_stream_server.py): never the bottleneck."""
    import subprocess
    import sys
    from pathlib import Path

    from dspark_bench.loadtests.deploy.local import free_port

    port = free_port()
    script = Path(__file__).resolve().parent / "fake_stream_server.py"
    process = subprocess.Popen([sys.executable, str(script), "--port", str(port)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    yield f"http://127.0.0.1:{port}"
    process.kill()
    process.wait()
