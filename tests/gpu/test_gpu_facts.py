"""The machine facts on a real GPU: NVML (nvidia-ml-py's ``pynvml``, or the copy vLLM ships) and nvidia-smi
name the same GPU, memory, driver and clocks, and a level's sampler reads utilisation, memory and the SM clock."""

from __future__ import annotations

import time

import pytest

from dspark_bench.loadtests import machine

pytestmark = [pytest.mark.gpu]


def test_nvml_and_nvidia_smi_tell_the_same_gpu():
    nvml = machine._nvml()
    if nvml is None:
        pytest.skip("no NVML here (neither nvidia-ml-py nor vLLM's copy, or no NVIDIA driver): nvidia-smi alone tells")
    through_nvml, through_smi = machine.nvml_facts(nvml), machine._smi_facts()
    assert machine.MachineFacts(gpu=through_nvml["gpu"]).gpus == machine.MachineFacts(gpu=through_smi["gpu"]).gpus
    assert through_nvml["gpu_memory_gib"] == pytest.approx(through_smi["gpu_memory_gib"], abs=0.1)
    assert through_nvml["gpu_driver"] == through_smi["gpu_driver"]
    assert through_nvml["cuda"] == through_smi["cuda"]
    assert through_nvml["gpu_clocks"] and through_nvml["gpu_clocks"] == through_smi["gpu_clocks"]
    assert machine.gpu_compute_processes() is not None


def test_a_levels_sampler_reads_the_gpu():
    sampler = machine.GpuSampler(interval_ms=100).start()
    time.sleep(1.0)
    sample = sampler.stop()
    assert sample.utilisation is not None and sample.memory_gib is not None and sample.sm_clock_mhz
