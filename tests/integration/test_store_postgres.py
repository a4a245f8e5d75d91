"""The run store on a real PostgreSQL server: runs recorded by two processes at once both land, history and
the gate against history read them back, and the server's password never reaches a log line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_bench.loadtests.results import load_results
from dspark_bench.store import RunStore

from .postgres_server import PostgresUnavailable, running_postgres

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RUNS = [ROOT / "benchmarks" / "reproducibility" / name for name in ("repro-d", "repro-e", "repro-f", "repro-h")]
REFERENCE = ROOT / "benchmarks" / "gate" / "reference"


@pytest.fixture(scope="module")
def postgres_url():
    try:
        with running_postgres("runs") as server:
            yield server.url("runs")
    except PostgresUnavailable as exc:
        pytest.fail(str(exc))


def _cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dspark_bench", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip


def test_concurrent_writers_history_and_the_gate_against_history_on_postgresql(postgres_url, tmp_path):
    copies = []
    for run in RUNS:
        copies.append(tmp_path / run.name)
        shutil.copytree(run, copies[-1])
    writers = [_cli("store", "import", str(run), "--store", postgres_url) for run in copies]  # all at once, on an empty database
    outputs = [writer.communicate(timeout=300)[0] for writer in writers]
    assert [w.returncode for w in writers] == [0] * len(RUNS), outputs
    with RunStore(postgres_url) as store:
        assert store.run_count() == len(RUNS)
        assert {row.name for row in store.history()} == {run.name for run in RUNS}
    history = _cli("history", "--store", postgres_url, "--arm", "dspark", "--level", "1")
    table = history.communicate(timeout=120)[0]
    assert history.returncode == 0 and table.count("machine: ") == 1 and f"({len(RUNS)} runs)" in table, table
    reference = tmp_path / "reference"
    shutil.copytree(REFERENCE, reference)
    gate = _cli("gate", "--run", str(reference), "--against", "history", "--store", postgres_url)
    out = gate.communicate(timeout=120)[0]
    assert gate.returncode == 0, out
    assert f"limits from {len(RUNS)} earlier complete run(s) of {load_results(reference).machine.kind}" in out
    assert "earlier runs of this machine kind" not in out or "FAIL" not in out


def test_an_unreachable_postgresql_store_names_it_without_the_password(postgres_url, tmp_path):
    port = postgres_url.rsplit(":", 1)[1].split("/")[0]
    wrong = f"postgresql://postgres:s3cret@127.0.0.1:{port}/no_such_database"
    history = _cli("history", "--store", wrong)
    out = history.communicate(timeout=120)[0]
    assert history.returncode == 2 and "s3cret" not in out and "no_such_database" in out, out
    assert len(out.strip().splitlines()) == 1, out
