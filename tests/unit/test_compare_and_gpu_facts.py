"""The one Comparison, the cut-answers warning, answer agreement, and the GPU facts and noise checks."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace

import pandas as pd
import pytest

from dspark_bench.loadtests import machine
from dspark_bench.loadtests.metrics import TRUNCATED_WARN_SHARE, level_health, level_metrics, level_warnings
from dspark_bench.reports.compare import answer_agreement, build_comparison, finished_speeds
from dspark_bench.reports.tables import format_summary, summary_frame
from tests.made_results import made_run


def _levels(ratio: float, truncated: float) -> list[dict]:
    levels = []
    for repeat, wobble in enumerate((1.0, 1.1, 0.9)):
        for arm, speed in (("baseline-constrained", 100.0 * wobble), ("dspark", 100.0 * wobble * ratio)):
            metrics = {"requests": 8, "effective_tok_s": speed, "rate_truncated": truncated, "latency_p95_ms": 100.0}
            levels.append({"arm": arm, "scenario": "s", "level": 8, "repeat": repeat, "metrics": metrics})
    return levels


def test_the_summary_and_the_comparison_print_one_ratio_and_an_interval_around_it():
    results = made_run(_levels(2.0, 0.0))
    comparison = build_comparison(results)
    paired = comparison.throughput[("s", 8.0, "dspark")]
    assert paired.ratio == pytest.approx(2.0)
    assert paired.low <= paired.ratio <= paired.high
    text = format_summary(summary_frame(results, comparison=comparison), compact=True)
    assert "2.00" in text and max(len(line) for line in text.splitlines()) <= 120


@pytest.mark.parametrize(("truncated", "warned"), [(0.0, False), (TRUNCATED_WARN_SHARE - 0.01, False), (0.38, True)])
def test_a_level_whose_answers_are_cut_is_warned_about(truncated, warned):
    comparison = build_comparison(made_run(_levels(2.0, truncated)))
    assert bool(comparison.warnings.get(("s", 8.0, "dspark"))) is warned
    metrics = level_metrics([])
    assert level_warnings(metrics) == ()  # no requests, nothing to warn about


def test_a_cut_warning_says_which_repeat_it_describes_beside_the_median_the_table_shows():
    levels = _levels(2.0, 0.0)
    for level in levels:  # repeats 0, 1, 2 cut 10%, 30% and 62% of their answers
        level["metrics"]["rate_truncated"] = (0.1, 0.3, 0.62)[level["repeat"]]
    results = made_run(levels)
    said = build_comparison(results).warnings[("s", 8.0, "dspark")]
    assert said[0].startswith("62% of the answers were cut") and said[-1] == "in the worst of its 3 repeats (cut: median 30%)"
    assert "30%" in format_summary(summary_frame(results), compact=True)  # the table's median
    one = made_run([level for level in levels if level["repeat"] == 2])
    assert len(build_comparison(one).warnings[("s", 8.0, "dspark")]) == 1  # one repeat: nothing to tell apart


def _records(rows: list[tuple[str, int, str, str, float]]) -> pd.DataFrame:
    """(arm, seed, output, finish_reason, latency_s) of one level and repeat."""
    return pd.DataFrame(
        [
            {"arm": a, "scenario": "s", "level": 8.0, "repeat": 0, "seed": seed, "output": out, "finish_reason": fin,
             "latency_s": lat, "output_tokens": 100, "status": 200, "error": None}
            for a, seed, out, fin, lat in rows
        ]
    )  # fmt: skip


def test_the_finished_speed_counts_only_prompts_that_ended_in_both_arms():
    records = _records([
        ("baseline-constrained", 1, "a", "stop", 1.0), ("dspark", 1, "a", "stop", 0.5),
        ("baseline-constrained", 2, "b", "length", 5.0), ("dspark", 2, "b", "length", 0.1),  # a loop, drafted fast
    ])  # fmt: skip
    speeds = finished_speeds(records)
    assert speeds[("s", 8.0, "dspark")][0] == pytest.approx(200.0)  # seed 2 left out: it never finished
    assert speeds[("s", 8.0, "baseline-constrained")][0] == pytest.approx(100.0)


def test_answer_agreement_pairs_the_same_prompt_and_counts_differences():
    records = _records([
        ("baseline-constrained", 1, "a", "stop", 1.0), ("dspark", 1, "a", "stop", 1.0),
        ("baseline-constrained", 2, "b", "stop", 1.0), ("dspark", 2, "B", "stop", 1.0),
        ("dspark", 3, "c", "stop", 1.0),  # no reference answer: not paired
    ])  # fmt: skip
    assert answer_agreement(records) == {("s", 8.0, "dspark"): (1, 2)}


def test_gpu_facts_name_the_gpu_its_memory_driver_and_cuda(monkeypatch):
    answers = {
        "-L": "GPU 0: NVIDIA H200 (UUID: GPU-1)",
        "--query-gpu=memory.total,driver_version": "143771, 580.159.04",
    }

    def fake(*args):
        return next((text for key, text in answers.items() if key in args or key in " ".join(args)), None)

    monkeypatch.setattr(machine, "_nvml", lambda: None)  # no NVML binding: nvidia-smi tells
    monkeypatch.setattr(machine, "_nvidia_smi", fake)
    facts = machine.gpu_facts()
    assert "NVIDIA H200" in facts["gpu"]
    assert facts.get("gpu_driver") == "580.159.04" and facts.get("gpu_memory_gib") == pytest.approx(140.4, abs=0.1)
    monkeypatch.setattr(machine, "_nvidia_smi", lambda *args: None)
    assert machine.gpu_facts() == {}


def test_another_process_on_the_gpu_is_a_problem_and_the_runs_own_are_not():
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        ours = {os.getpgid(0)}
        others = machine.gpu_others([(os.getpid(), 10.0), (sleeper.pid, 2048.0)], ours)
        assert others == (f"pid {sleeper.pid} (2,048 MiB)",)
        assert machine.gpu_problems(others) and not machine.gpu_problems(())
        assert machine.gpu_others(None, ours) is None  # no GPU: cannot be told
    finally:
        sleeper.kill()
        sleeper.wait()


class FakeNvml:
    """NVML's Python binding as nvidia-ml-py spells it, for one GPU: what ``machine`` calls, and nothing else."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    class NotSupported(Exception):
        pass

    def __init__(self, processes=(), clocks=True):
        self.processes = [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in processes]
        self.clocks = clocks

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"handle-{index}"

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H100 80GB HBM3"  # older bindings give bytes

    def nvmlDeviceGetUUID(self, handle):
        return "GPU-5e1f"

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=85520809984, used=0, free=85520809984)

    def nvmlSystemGetDriverVersion(self):
        return "580.159.04"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        if not self.clocks:
            raise self.NotSupported("NVML_ERROR_NOT_SUPPORTED")
        return {self.NVML_CLOCK_SM: 1980, self.NVML_CLOCK_MEM: 2619}[clock]

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self.processes


def test_nvml_names_the_gpu_its_memory_driver_cuda_and_clocks_and_leaves_out_what_it_will_not_say(monkeypatch):
    facts = machine.nvml_facts(FakeNvml())
    assert facts == {
        "gpu": "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5e1f)", "gpu_memory_gib": 79.6, "gpu_driver": "580.159.04",
        "cuda": "13.0 (driver)", "gpu_clocks": "SM 1980 MHz, memory 2619 MHz at most",
    }  # fmt: skip
    assert "gpu_clocks" not in machine.nvml_facts(FakeNvml(clocks=False))
    monkeypatch.setattr(machine, "_nvml", lambda: FakeNvml())
    named = machine.MachineFacts(**machine.gpu_facts())
    assert named.gpus == ["NVIDIA H100 80GB HBM3"] and named.summary.startswith("1x NVIDIA H100 80GB HBM3, 79.6 GiB (driver 580.159.04")

    class Unnamed(FakeNvml):
        def nvmlDeviceGetName(self, handle):
            raise self.NotSupported("NVML_ERROR_UNKNOWN")

    # NVML that cannot name the GPU tells nothing: nvidia-smi does
    monkeypatch.setattr(machine, "_nvml", lambda: Unnamed())
    monkeypatch.setattr(machine, "_nvidia_smi", lambda *args: "GPU 0: NVIDIA H200 (UUID: GPU-1)" if args == ("-L",) else None)
    assert machine.gpu_facts()["gpu"] == "GPU 0: NVIDIA H200 (UUID: GPU-1)"


def test_a_level_beside_another_process_on_the_gpu_is_not_valid_as_nvml_lists_it(monkeypatch):
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)  # another process group: not the run's
    try:
        ours = {os.getpgid(0)}
        monkeypatch.setattr(machine, "_nvml", lambda: FakeNvml([(os.getpid(), 2**30), (sleeper.pid, 3 * 2**30)]))
        others = machine.gpu_others(machine.gpu_compute_processes(), ours)
        health = level_health(8, level_metrics([]), {}, {}, None, False, True, gpu_others=others)
        assert not health.valid and health.problems == (f"other processes computed on the GPU: pid {sleeper.pid} (3,072 MiB) "
                                                        "(stop them, or give the run a GPU of its own)",)  # fmt: skip
        monkeypatch.setattr(machine, "_nvml", lambda: FakeNvml([(os.getpid(), 2**30)]))  # the run's own only
        alone = level_health(8, level_metrics([]), {}, {}, None, False, True, gpu_others=machine.gpu_others(machine.gpu_compute_processes(), ours))
        assert alone.gpu_other_processes == () and not any("GPU" in problem for problem in alone.problems)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_levels_gpu_samples_give_its_mean_utilisation_peak_memory_and_mean_clock():
    sample = machine.gpu_sample("90, 20480, 1980\n 70 , 30720, 1400\n[N/A], [N/A], [N/A]\n")
    assert sample == machine.GpuSample(utilisation=pytest.approx(0.8), memory_gib=30.0, sm_clock_mhz=1690)
    assert machine.gpu_sample("") == machine.GpuSample()
    health = level_health(8, level_metrics([]), {}, {}, None, False, True, gpu=sample)
    assert (health.gpu_utilisation, health.gpu_memory_gib, health.gpu_sm_clock_mhz) == (pytest.approx(0.8), 30.0, 1690)


def test_no_share_of_the_machines_cpu_exceeds_all_of_it_when_a_server_dies():
    """A server that exits mid-level takes its CPU seconds with it: its group's sum falls."""
    before = machine.CpuSnapshot(at=0.0, machine_busy_s=10.0, steal_s=0.0, servers_s=50.0, harness_s=1.0)
    after = machine.CpuSnapshot(at=1.0, machine_busy_s=14.0, steal_s=0.0, servers_s=0.0, harness_s=1.5)
    noise = machine.cpu_noise(before, after, cores=2)
    assert 0.0 <= noise["other_cpu_share"] <= 1.0
    assert all(0.0 <= share <= 1.0 for name, share in noise.items() if name.endswith("share"))
