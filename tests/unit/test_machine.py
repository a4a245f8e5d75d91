"""Machine facts and the per-level noise measure."""

import os

from dspark_bench.loadtests.machine import CpuSnapshot, cpu_noise, cpu_snapshot, machine_facts, machine_summary, noise_problems


def test_noise_is_the_machines_cpu_less_servers_and_harness():
    before = CpuSnapshot(at=0.0, machine_busy_s=100.0, steal_s=1.0, servers_s=40.0, harness_s=5.0)
    after = CpuSnapshot(at=10.0, machine_busy_s=118.0, steal_s=2.0, servers_s=52.0, harness_s=7.0)
    noise = cpu_noise(before, after, cores=2)  # 18 busy = 12 servers + 2 harness + 4 other, over 20 CPU-seconds
    assert noise["other_cpu_s"] == 4.0 and noise["other_cpu_share"] == 0.2 and noise["steal_share"] == 0.05
    assert noise_problems(noise) == ["other processes took 20% of the machine's CPU"]
    assert cpu_noise(None, after) == {} and noise_problems({}) == []


def test_a_busy_process_beside_the_harness_shows_as_noise():
    pid = os.fork()
    if pid == 0:  # a neighbour that burns CPU for half a second
        import time

        end = time.time() + 0.5
        while time.time() < end:
            pass
        os._exit(0)
    before = cpu_snapshot([])
    os.waitpid(pid, 0)
    after = cpu_snapshot([])
    # the neighbour exited (its time leaves with it from its own group's view) but the machine counted it
    assert cpu_noise(before, after)["other_cpu_s"] >= 0.3


def test_machine_facts_say_what_decides_speed():
    facts = machine_facts()
    assert facts["cores"] == os.cpu_count() and "amx" in facts and isinstance(facts["cpu_flags"], list)
    assert facts["summary"].startswith(str(facts["cpu"]))
    assert "no AMX" in machine_summary({"cpu": "X", "cores": 2, "cpu_flags": ["avx2"]})
    assert "AMX not recorded" in machine_summary({"cpu": "X", "cores": 2})  # a run from before the flags were kept
    assert "AMX" in machine_summary({"cpu": "X", "cores": 2, "cpu_flags": ["amx_bf16"], "virtualization": "kvm"})
