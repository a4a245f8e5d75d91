"""Machine facts and the per-level noise measure."""

import os

from dspark_bench.loadtests.machine import (
    CpuSnapshot,
    MachineFacts,
    cpu_noise,
    cpu_snapshot,
    dtype_line,
    listening_pgid,
    machine_facts,
    noise_problems,
    serving_dtype,
)


def test_noise_is_the_machines_cpu_less_servers_and_harness():
    before = CpuSnapshot(at=0.0, machine_busy_s=100.0, steal_s=1.0, servers_s=40.0, harness_s=5.0)
    after = CpuSnapshot(at=10.0, machine_busy_s=118.0, steal_s=2.0, servers_s=52.0, harness_s=7.0)
    noise = cpu_noise(before, after, cores=2)  # 18 busy = 12 servers + 2 harness + 4 other, over 20 CPU-seconds
    assert noise["other_cpu_s"] == 4.0 and noise["other_cpu_share"] == 0.2 and noise["steal_share"] == 0.05
    assert noise_problems(noise) == ["other processes took 20% of the machine's CPU"]
    assert cpu_noise(None, after) == {} and noise_problems({}) == []


def test_the_other_arms_idle_servers_are_noise_and_named_as_such():
    before = CpuSnapshot(at=0.0, machine_busy_s=100.0, steal_s=0.0, servers_s=40.0, harness_s=5.0, idle_servers_s=10.0)
    after = CpuSnapshot(at=10.0, machine_busy_s=118.0, steal_s=0.0, servers_s=52.0, harness_s=7.0, idle_servers_s=13.0)
    noise = cpu_noise(before, after, cores=2)  # 4 other CPU-seconds, 3 of them the idle servers'
    assert noise["other_cpu_share"] == 0.2 and noise["idle_servers_cpu_share"] == 0.15
    assert noise_problems(noise) == ["other processes took 20% of the machine's CPU (15% the other arms' idle servers)"]
    quiet = cpu_noise(before, CpuSnapshot(10.0, 114.0, 0.0, 52.0, 7.0, 10.0), cores=2)
    assert quiet["other_cpu_share"] == 0.0 and noise_problems(quiet) == []


def test_a_server_at_a_url_on_this_machine_is_found_by_its_port():
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = f"import socket,time; s=socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); print('up', flush=True); time.sleep(30)"
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "up"
        assert listening_pgid(f"http://127.0.0.1:{port}/v1") == server.pid  # its own session: its own group
        assert listening_pgid(f"http://localhost:{port}") == server.pid
    finally:
        server.kill()
        server.wait()
    assert listening_pgid(f"http://127.0.0.1:{port}") is None  # nobody listens any more
    assert listening_pgid("https://api.example.com") is None  # another host


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
    assert facts.cores == os.cpu_count() and isinstance(facts.amx, bool) and isinstance(facts.cpu_flags, tuple)
    assert facts.summary.startswith(str(facts.cpu)) and facts.as_dict()["summary"] == facts.summary
    assert MachineFacts.from_dict(facts.as_dict()) == facts
    assert "no AMX" in MachineFacts("X", 2, ("avx2",)).summary
    assert "AMX not recorded" in MachineFacts.from_dict({"cpu": "X", "cores": 2}).summary  # a run before the flags were kept
    assert "AMX" in MachineFacts("X", 2, ("amx_bf16",), virtualization="kvm").summary


def test_local_servers_run_float32_only_where_the_cpu_emulates_bf16():
    avx2, avx512, amx = MachineFacts("X", 2, ("avx2",)), MachineFacts("X", 2, ("avx512f", "avx512_bf16")), MachineFacts("X", 2, ("amx_bf16",))
    assert serving_dtype("auto", avx2) == "float32"
    assert serving_dtype("auto", avx512) == serving_dtype("auto", amx) == "auto"  # the model's own bf16
    assert serving_dtype("auto", MachineFacts("X", 2, ("avx2",), gpu="GPU 0: NVIDIA H200")) == "auto"
    assert serving_dtype("auto", MachineFacts("X", 2, ("avx512f",))) == "float32"  # AVX-512 without BF16 emulates it too
    assert serving_dtype("bfloat16", avx2) == "bfloat16"  # a set dtype is kept
    assert "no native bf16" in dtype_line("auto", avx2) and dtype_line("bfloat16", avx2) == "dtype: bfloat16 (set)"


def test_every_local_arm_gets_the_machines_dtype(tmp_path):
    from dspark_bench.loadtests.config import load_config
    from dspark_bench.loadtests.deploy.servers import common_server_args, server_specs

    config = load_config()
    specs = server_specs(config, list(config.arms), MachineFacts("X", 2, ("avx2",)))
    assert all(spec.common_args[:2] == ["--dtype", "float32"] for spec in specs) and len(specs) == 3
    assert "--dtype" not in common_server_args(config, MachineFacts("X", 2, ("amx_bf16",)))
    cluster = load_config(gpustack={"url": "http://127.0.0.1:9", "model_path": "/m"})
    assert "--dtype" not in common_server_args(cluster, MachineFacts("X", 2, ("avx2",)))  # the cluster's machines choose
