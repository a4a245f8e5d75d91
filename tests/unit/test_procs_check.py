"""The orphan-process check the integration tests rely on finds a process that was left behind."""

import json
import subprocess
import sys

import pytest

from tests.integration.procs import assert_no_server_left, processes_on_port


def test_orphan_check_catches_a_process_left_behind(tmp_path):
    port = 45871
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--port", str(port)])
    try:
        (tmp_path / "results.json").write_text(json.dumps({"arms": {"a": {"base_url": f"http://127.0.0.1:{port}"}}}))
        assert str(sleeper.pid) in processes_on_port(port).split()
        with pytest.raises(AssertionError, match="orphan server processes"):
            assert_no_server_left(tmp_path)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert_no_server_left(tmp_path)  # and passes once it is gone
