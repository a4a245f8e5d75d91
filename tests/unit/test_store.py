"""The run store on SQLite: committed runs import once, history groups them by machine kind, the gate takes
its limits from history, two writers at once lose nothing, and a store that fails costs the run nothing."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from dspark_bench.cli import _report, main
from dspark_bench.loadtests.results import RunResults, load_results
from dspark_bench.reports.gate import Thresholds, evaluate, load_thresholds
from dspark_bench.reports.history import MIN_HISTORY, history_limit, run_ratios, standings
from dspark_bench.store import STORE_SCHEMA, RunStore, StoreError, run_id, safe_url

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "benchmarks" / "gate" / "reference"
AMX_RUNS = [ROOT / "benchmarks" / "reproducibility" / name for name in ("repro-d", "repro-e", "repro-f", "repro-h")]


@pytest.fixture()
def store_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'store.sqlite'}"


def test_committed_runs_import_once_and_history_groups_them_by_machine(store_url, capsys):
    assert main(["store", "import", str(ROOT / "benchmarks"), "--store", store_url]) == 0
    first = capsys.readouterr().out
    assert "skipped" in first and "no list of levels" in first  # the study outputs (crosscheck, equality) are no runs
    with RunStore(store_url) as store:
        imported = store.run_count()
    assert imported >= 20
    assert main(["store", "import", str(ROOT / "benchmarks"), "--store", store_url]) == 0
    assert f"0 run(s) imported, {imported} already there" in capsys.readouterr().out
    assert main(["history", "--store", store_url]) == 0
    table = capsys.readouterr().out
    kinds = [line for line in table.splitlines() if line.startswith("machine: ")]
    assert len(kinds) >= 3 and any("amx" in k for k in kinds) and any("avx2" in k for k in kinds), kinds
    assert any("NVIDIA H200" in k for k in kinds), kinds  # a GPU run is its own kind of machine
    assert "(incomplete)" in table  # benchmarks/dspark/peers stopped early and says so
    assert main(["history", "--store", store_url, "--machine", "xeon(r) processor · 2 cores", "--arm", "dspark", "--level", "1", "--last", "2"]) == 0
    filtered = capsys.readouterr().out
    assert filtered.count("machine: ") == 1 and "(2 runs)" in filtered and " dspark " in filtered


def test_the_same_run_under_another_folder_name_is_not_recorded_twice(store_url, tmp_path):
    copied = tmp_path / "renamed"
    shutil.copytree(REFERENCE, copied)
    with RunStore(store_url) as store:
        assert store.record(load_results(REFERENCE), [], "import")
        assert not store.record(load_results(copied), [], "import")
        assert store.run_count() == 1


def _with_history(store_url: str) -> list:
    results = load_results(REFERENCE)
    with RunStore(store_url) as store:
        for path in AMX_RUNS:
            earlier = load_results(path)
            store.record(earlier, run_ratios(earlier), "import")
        return store.history(machine_kind=results.machine.kind, complete_only=True, exclude=[run_id(results)])


def test_the_gate_against_history_passes_the_real_run_and_fails_it_with_speculation_off(store_url):
    history = _with_history(store_url)
    assert len({row.run_id for row in history}) == len(AMX_RUNS) >= MIN_HISTORY
    thresholds = load_thresholds(ROOT / "benchmarks" / "gate" / "thresholds.yaml")
    loose = Thresholds(against=thresholds.against, noise_margin=thresholds.noise_margin, min_speedup={"dspark": {1: 0.1, 8: 0.1}},
                       min_acceptance_length=thresholds.min_acceptance_length)  # fmt: skip
    raw = json.loads((REFERENCE / "results.json").read_text())
    checks = evaluate(RunResults.from_dict(raw), loose, history=history)
    speedups = [c for c in checks if c.check.startswith("speed-up")]
    assert all(c.passed for c in checks) and len(speedups) == 2
    assert all("earlier runs of this machine kind" in c.detail and c.limit > 1.0 for c in speedups)  # not the file's 0.1
    off = copy.deepcopy(raw)  # what --dspark-drafter off gives: stock vLLM's speed, no drafts
    base = {(row["level"], row["repeat"]): row["metrics"]["effective_tok_s"] for row in off["levels"] if row["arm"] == "baseline-constrained"}
    for row in (r for r in off["levels"] if r["arm"] == "dspark"):
        row["metrics"]["effective_tok_s"] = base[(row["level"], row["repeat"])]
        row["server"] = {k: v for k, v in row["server"].items() if not k.startswith("vllm:spec_decode")}
    failed = {c.check for c in evaluate(RunResults.from_dict(off), loose, history=history) if not c.passed}
    assert failed == {"speed-up vs baseline-constrained", "mean acceptance length"}


def test_too_little_history_falls_back_to_the_thresholds_file_and_says_so():
    results = load_results(REFERENCE)
    thresholds = Thresholds(noise_margin=0.0, min_speedup={"dspark": {1: 99.0}})
    check = next(c for c in evaluate(results, thresholds, history=[]) if c.check.startswith("speed-up"))
    assert check.limit == 99.0 and not check.passed and "only 0 earlier runs" in check.detail


def test_history_limits_and_standings_are_pure_arithmetic():
    assert history_limit([2.0, 2.2], 0.05) is None
    limit, margin = history_limit([3.0, 3.3, 3.6], 0.05)
    assert margin == pytest.approx(0.6 / 3.3) and limit == pytest.approx(3.3 * (1 - 0.6 / 3.3))
    assert history_limit([1.0, 5.0, 9.0], 0.05)[1] == 0.25  # capped
    history = _with_history_rows([3.0, 3.3, 3.6])
    ratio = run_ratios(load_results(REFERENCE))[0]
    inside = standings([replace(ratio, ratio=3.2)], history)[0]
    outside = standings([replace(ratio, ratio=2.0)], history)[0]
    assert not inside.outside and outside.outside and inside.runs == 3


def _with_history_rows(values):
    from dspark_bench.store import HistoryRow

    ratio = run_ratios(load_results(REFERENCE))[0]
    return [HistoryRow(f"r{i}", "n", "t", True, "k", "bench", replace(ratio, ratio=v)) for i, v in enumerate(values)]


def test_a_run_report_shows_where_it_stands_and_records_it(store_url, tmp_path, capsys):
    _with_history(store_url)
    run = tmp_path / "run"
    shutil.copytree(REFERENCE, run)
    _report(run, store_url, "bench")
    out = capsys.readouterr().out
    assert "store: recorded in" in out and f"({len(AMX_RUNS)} earlier run(s) of this machine kind)" in out
    page = (run / "report.html").read_text()
    assert "Against history" in page and f"{len(AMX_RUNS)} runs" in page


def test_a_store_that_fails_costs_the_run_nothing_and_hides_its_password(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(REFERENCE, run)
    _report(run, "postgresql://bench:s3cret@127.0.0.1:1/runs", "bench")
    captured = capsys.readouterr()
    assert "s3cret" not in captured.out + captured.err and "***" in captured.err
    assert "record it later with: dspark-bench store import" in captured.err and len(captured.err.strip().splitlines()) == 1
    assert (run / "report.html").exists() and "s3cret" not in (run / "results.json").read_text()
    assert safe_url("postgresql://bench:s3cret@host/db") == "postgresql://bench:***@host/db"


def test_a_newer_store_is_refused_in_one_line(store_url, capsys):
    with RunStore(store_url) as store, store.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE dspark_meta SET value = '{STORE_SCHEMA + 1}' WHERE key = 'schema'")
    with pytest.raises(StoreError, match="newer than this dspark-bench reads"):
        RunStore(store_url)
    assert main(["history", "--store", store_url]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_two_runs_recorded_at_once_into_a_new_store_both_land(store_url, tmp_path):
    """Two processes create the store and write to it at the same time."""
    runs = []
    for name in AMX_RUNS[:2]:
        runs.append(tmp_path / name.name)
        shutil.copytree(name, runs[-1])
    writers = [
        subprocess.Popen([sys.executable, "-m", "dspark_bench", "store", "import", str(run), "--store", store_url],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        for run in runs
    ]
    outputs = [writer.communicate(timeout=300)[0] for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0], outputs
    with RunStore(store_url) as store:
        assert store.run_count() == 2
        assert {row.name for row in store.history()} == {run.name for run in runs}
