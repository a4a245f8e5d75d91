"""The harness and the engine patch on a real GPU, as a user runs them: ``dspark-bench bench`` with local
arms (stock vLLM and dspark-serve sharing the GPU), then what the run says about itself.

``DSPARK_GPU_RUN=DIR`` checks a run folder made on the GPU already (``tools/gpu_host.sh bench``), instead of
starting servers for a run of its own: one server start per device call."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_bench.loadtests.results import load_results
from dspark_bench.reports.article import load_records
from dspark_bench.reports.compare import answer_agreement

pytestmark = [pytest.mark.gpu, pytest.mark.integration]


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory) -> Path:
    if saved := os.environ.get("DSPARK_GPU_RUN"):
        assert (Path(saved) / "results.json").is_file(), f"DSPARK_GPU_RUN={saved}: no results.json there"
        return Path(saved)
    out = tmp_path_factory.mktemp("gpu-run")
    command = [
        sys.executable, "-m", "dspark_bench", "bench",
        "--config", "dspark_bench/loadtests/configs/gpu-default.yaml",
        "--arms", "baseline-constrained,dspark", "--levels", "1,16", "--requests", "16", "--repeats", "2",
        "--budget-minutes", "2", "--out", str(out), "--name", "gpu-test",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out / "gpu-test"


def test_the_run_names_the_gpu_and_its_stack(gpu_run):
    machine = load_results(gpu_run).machine
    assert machine.gpu and "NVIDIA" in machine.gpu
    assert machine.gpu_memory_gib and machine.gpu_driver and machine.cuda
    assert "NVIDIA" in machine.summary.split(";")[0]  # the GPU is named first, the host after


def test_every_level_held_its_load_on_the_gpu(gpu_run):
    results = load_results(gpu_run)
    finished = [level for level in results.levels if not level.health.incomplete]  # a budget's end cuts the last one
    assert finished
    for level in finished:
        assert level.health.valid, (level.arm, level.level, level.health.problems)
        assert level.health.gpu_utilisation is not None  # sampled while the level ran


# Above this many users the arms' batches differ enough for stock vLLM's own bf16 rounding to flip a near-tie:
# on an H200 at 256 users one answer in 3,383 differed from stock's, with dspark and dspark-ngram (which
# barely drafts) giving the same other answer (two characters of a name swapped; benchmarks/gpu/RESULTS.md).
EXACT_UP_TO_USERS = 64
NEAR_TIES_PER_ANSWER = 0.001


def test_dspark_answers_equal_stock_on_the_gpu(gpu_run):
    if load_results(gpu_run).config.temperature != 0:
        pytest.skip("sampled answers (temperature above 0) differ by design")
    agreement = answer_agreement(load_records(gpu_run), "baseline-constrained")
    assert agreement, "no paired answers"
    for (scenario, level, arm), (equal, pairs) in agreement.items():
        allowed = 0 if level <= EXACT_UP_TO_USERS else int(NEAR_TIES_PER_ANSWER * pairs)
        assert pairs > 0 and pairs - equal <= allowed, (scenario, level, arm, equal, pairs)


def test_dspark_serve_ran_asynchronously_with_the_governor(gpu_run):
    log = next(gpu_run.glob("**/dspark*.log")).read_text(errors="replace")
    assert "asynchronous scheduling" in log
