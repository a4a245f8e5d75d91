"""``make test``'s runner (tests/suite.py): unit and integration tests side by side, one verdict for both."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TESTS = '''
import pytest

def test_unit_passes():
    assert True

def test_unit_fails():
    assert 1 == 2, "a unit test that fails"

@pytest.mark.integration
def test_integration_runs_at_the_lowest_priority():
    import os
    assert os.sched_getscheduler(0) == os.SCHED_IDLE
'''


def _suite(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_both.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    integration: x\n")
    # run from tmp_path: the runner's build/test-unit.log must not be the one of the make test running this test
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tests.suite", "-p", "no:cacheprovider", *args, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.mark.slow
def test_both_kinds_run_and_a_failing_unit_test_fails_the_whole(tmp_path):
    out = _suite(tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 passed" in out.stdout  # the integration test, live, at SCHED_IDLE
    assert "a unit test that fails" in out.stdout  # the unit run's failure, from its log
    assert "make test FAILED" in out.stdout and "unit tests exit 1, integration tests exit 0" in out.stdout
    assert (tmp_path / "build" / "test-unit.log").is_file()

    passing = _suite(tmp_path, "-k", "not fails")
    assert passing.returncode == 0 and "make test passed" in passing.stdout, passing.stdout
