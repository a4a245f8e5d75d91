"""What the harness says when a server fails: the root cause in one line, not a traceback."""

import pytest

from dspark_bench.loadtests.deploy.base import failure_summary, root_cause

VLLM_OOM = """$ .venv/bin/python -m dspark_serve.serve --model models/tiny-json
# env: {'VLLM_CPU_KVCACHE_SPACE': '2'}
(APIServer pid=14517) WARNING 11-29 17:06:47 [system_utils.py:255] Found ulimit of 20000 and failed to automatically increase
(Worker pid=14696) ERROR 11-29 17:11:26 [multiproc_executor.py:1063] Traceback (most recent call last):
(Worker pid=14696) ERROR 11-29 17:11:26 [multiproc_executor.py:1063]     raise ValueError(
(Worker pid=14696) ERROR 11-29 17:11:26 [multiproc_executor.py:1063] ValueError: Available memory on node 0 (1.98/23.54 GiB) on kv cache allocation is less than requested memory for kv (2.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other processes.
(EngineCore pid=14610) ERROR 11-29 17:11:26 [core.py:1510] RuntimeError: Worker failed with error 'Available memory'
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
  warnings.warn('resource_tracker: There appear to be %d '
"""


def test_root_cause_is_the_first_exception_message():
    assert root_cause(VLLM_OOM).startswith("ValueError: Available memory on node 0 (1.98/23.54 GiB)")
    assert root_cause(VLLM_OOM).endswith("reduce CPU memory used by other processes.")
    refused = (
        "$ dspark-serve --model m\ndspark-serve: error: dspark requires prefix-caching; fix: drop --no-enable-prefix-caching\n"
    )
    assert root_cause(refused) == "dspark-serve: error: dspark requires prefix-caching; fix: drop --no-enable-prefix-caching"
    # no exception in the log: the last thing the server printed, never the harness's own header
    assert root_cause("$ server --x\n# env: {}\nloading...\ncannot bind port 8000\n\n") == "cannot bind port 8000"
    assert root_cause("$ server --x\n# env: {}\n") == "(the server printed nothing)"
    died = "ValueError: schema 7 does not compile (request refused, server went on)\nRuntimeError: EngineCore died\n"
    assert root_cause(died) == "ValueError: schema 7 does not compile (request refused, server went on)"
    assert root_cause(died, latest=True) == "RuntimeError: EngineCore died"
    assert "ErrorCount: 0" not in root_cause("ErrorCount: 0 is fine\nlast line\n")  # only *Error / *Exception names


def test_failure_summary_names_the_log(tmp_path):
    log = tmp_path / "dspark.log"
    log.write_text(VLLM_OOM)
    summary = failure_summary(log)
    assert "\n" not in summary and summary.startswith("ValueError: Available memory") and str(log) in summary
    assert failure_summary(tmp_path / "missing.log") == "(no log)"


def test_arms_that_would_start_the_same_server_share_one():
    from dspark_bench.loadtests.config import load_config
    from dspark_bench.loadtests.deploy.servers import server_specs, shared_servers

    arms = ["baseline", "baseline-constrained", "dspark", "oracle"]
    starts, owner = shared_servers(server_specs(load_config(), arms))
    # baseline and baseline-constrained differ only in how they ask for JSON; dspark and oracle in their drafter
    assert [spec.arm for spec in starts] == ["baseline", "dspark", "oracle"]
    assert owner == {"baseline": "baseline", "baseline-constrained": "baseline", "dspark": "dspark", "oracle": "oracle"}
    assert "--no-enable-prefix-caching" not in starts[0].args  # stock vLLM as it ships: its prefix cache on


def test_cpu_placement_is_checked_and_a_local_server_runs_where_it_is_placed(tmp_path):
    import os
    import sys
    import time

    import pytest

    from dspark_bench.loadtests.config import ConfigError, load_config, parse_cpu_list, placement_line
    from dspark_bench.loadtests.deploy.base import ServerSpec
    from dspark_bench.loadtests.deploy.local import LocalDeployer
    from dspark_bench.loadtests.deploy.servers import server_specs

    assert parse_cpu_list("0-3,8") == {0, 1, 2, 3, 8}
    cpus = sorted(os.sched_getaffinity(0))
    first, last = str(cpus[0]), str(cpus[-1])
    for settings, problem in (
        ({"server_cpus": "a-b"}, "is not a CPU list"),
        ({"client_cpus": "4096"}, "not available here"),
        ({"server_cpus": first, "client_cpus": first}, "disjoint"),
        ({"server_cpus": first, "urls": {"baseline": "http://127.0.0.1:1"}, "arms": "baseline"}, "only local arms are placed"),
    ):
        with pytest.raises(ConfigError, match=problem):
            load_config(None, **settings)
    config = load_config(None, server_cpus=first, client_cpus=last)
    assert placement_line(config) == f"placement: local servers on CPUs {first}, the load generator on CPUs {last}"
    [spec] = server_specs(config, ["dspark"])
    assert spec.cpus == {cpus[0]} and spec.env["VLLM_CPU_OMP_THREADS_BIND"] == first  # vLLM binds its threads there
    # a "server" that prints the CPUs it may run on: the deployer places the process it starts
    show = "import os, time; print('placed at', sorted(os.sched_getaffinity(0)), flush=True); time.sleep(60)"
    deployer = LocalDeployer(tmp_path)
    endpoint = deployer.launch(ServerSpec("probe", "m", "m", [sys.executable, "-c", show], cpus=frozenset({cpus[0]})))
    try:
        deadline = time.monotonic() + 30
        while "placed at [" not in endpoint.log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert f"placed at [{cpus[0]}]" in endpoint.log_path.read_text()
    finally:
        deployer.stop_all()
    assert sorted(os.sched_getaffinity(0)) == cpus  # this process stays where it was


def test_a_run_places_its_load_generator_and_puts_it_back(fast_server, tmp_path, monkeypatch):
    import os

    from dspark_bench.loadtests import sweep
    from dspark_bench.loadtests.config import load_config

    cpus = os.sched_getaffinity(0)
    placed: list[set[int]] = []
    real = os.sched_setaffinity
    monkeypatch.setattr(sweep.os, "sched_setaffinity", lambda pid, where: (placed.append(set(where)), real(pid, where)))
    last = max(cpus)
    config = load_config(None, arms="baseline-constrained", urls={"baseline-constrained": fast_server}, client_cpus=str(last),
                         levels=[1], requests_per_level=4, warmup_requests=0, output_dir=str(tmp_path), run_name="placed")  # fmt: skip
    assert sweep.run_sweep(config, tmp_path / "placed").complete
    assert placed == [{last}, cpus] and os.sched_getaffinity(0) == cpus


def test_a_local_arm_whose_server_is_not_installed_stops_with_the_fix(tmp_path):
    """dspark-serve is its own distribution: a harness without it says so before any server is waited for."""
    import sys

    import pytest

    from dspark_bench.loadtests.deploy.base import DeployError, ServerSpec
    from dspark_bench.loadtests.deploy.local import LocalDeployer

    deployer = LocalDeployer(tmp_path)
    missing = ServerSpec("dspark", "m", "m", [sys.executable, "-m", "dspark_serve_not_here.serve"])
    with pytest.raises(DeployError, match=r"arm 'dspark': its server is python -m dspark_serve_not_here.serve, which is not installed"):
        deployer.launch(missing)
    assert not deployer.endpoints and not list(tmp_path.iterdir())  # nothing started, no log


# A "server" that logs when it started and its argv (with a KV cache figure as vLLM logs it when it profiled,
# unless --quiet), then answers /health once a second has passed (a start-up).
SLOW_HEALTH = """
import http.server, json, sys, time
started = time.time()
print("started at", started, json.dumps(sys.argv), flush=True)
if "--fail-sized" in sys.argv and "--kv-cache-memory-bytes" in sys.argv:
    sys.exit("ValueError: the given KV cache does not fit")
if "--quiet" not in sys.argv and "--kv-cache-memory-bytes" not in sys.argv:
    print("(EngineCore pid=1) INFO [gpu_worker.py:759] Available KV cache " + "memory: 1.50 GiB", flush=True)  # not in the log's argv line
port = int(sys.argv[sys.argv.index("--port") + 1])
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if time.time() - started > 1.0 else 503)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


@pytest.mark.slow
def test_servers_that_share_a_gpu_start_after_the_first_with_the_kv_cache_it_measured(tmp_path, monkeypatch):
    """vLLM sizes its KV cache from the GPU memory free while it profiles: a neighbour starting beside it takes
    that memory. So of servers that share a GPU the first starts alone, and the others start together once it
    is ready, with the KV cache it measured (vLLM then skips the profile); where its log gives no figure, one
    after another. On a CPU their starts overlap."""
    import json
    import sys

    from dspark_bench.loadtests.config import load_config
    from dspark_bench.loadtests.deploy.base import ServerSpec
    from dspark_bench.loadtests.deploy.local import LocalDeployer, kv_cache_bytes
    from dspark_bench.loadtests.deploy.servers import server_specs
    from dspark_bench.loadtests.machine import machine_facts

    gpu_host = machine_facts().__class__(**{**machine_facts().__dict__, "gpu": "NVIDIA H200"})
    specs = server_specs(load_config(), ["baseline-constrained", "dspark"], gpu_host)
    assert all(spec.shares_gpu for spec in specs) and "--gpu-memory-utilization" in specs[0].args
    assert not any(spec.shares_gpu for spec in server_specs(load_config(), ["baseline-constrained", "dspark"]))  # this CPU
    # vLLM 0.32 on a CPU cannot load its AOT compile cache back: CPU arms use the older cache, GPU arms vLLM's default
    assert all(spec.env["VLLM_USE_AOT_COMPILE"] == "0" for spec in server_specs(load_config(), ["baseline-constrained", "dspark"]))
    assert not any("VLLM_USE_AOT_COMPILE" in spec.env for spec in specs)
    assert kv_cache_bytes("Available KV cache memory: 30.72 GiB") == int(30.72 * 2**30 * 0.95)
    assert kv_cache_bytes("Available KV cache memory: -39.72 GiB") is None and kv_cache_bytes("no figure") is None

    def started(endpoint) -> tuple[float, list[str]]:
        first_line = endpoint.log_path.read_text().split("started at ")[1].splitlines()[0]
        at, argv = first_line.split(" ", 1)
        return float(at), json.loads(argv)

    launcher = [sys.executable, "-c", SLOW_HEALTH]
    for shares_gpu, quiet in ((True, False), (True, True), (False, False)):
        deployer = LocalDeployer(tmp_path / f"{shares_gpu}-{quiet}", startup_timeout_s=30)
        args = ["--quiet"] if quiet else []
        try:
            endpoints = deployer.start_many([ServerSpec(arm, "m", "m", launcher, args, shares_gpu=shares_gpu) for arm in "abc"])
            (a, a_argv), (b, b_argv), (c, c_argv) = (started(endpoint) for endpoint in endpoints)
        finally:
            deployer.stop_all()
        assert [endpoint.arm for endpoint in endpoints] == ["a", "b", "c"]
        assert (b - a > 1.0) is shares_gpu, (shares_gpu, quiet, b - a)  # the first alone
        assert (c - b > 1.0) is (shares_gpu and quiet), (shares_gpu, quiet, c - b)  # the others together where it measured
        sized = shares_gpu and not quiet
        assert "--kv-cache-memory-bytes" not in a_argv
        for argv in (b_argv, c_argv):
            assert ("--kv-cache-memory-bytes" in argv) is sized
            assert not sized or argv[argv.index("--kv-cache-memory-bytes") + 1] == str(int(1.5 * 2**30 * 0.95))

    # A server the given cache does not start starts again alone, profiling as before; its first log is kept
    deployer = LocalDeployer(tmp_path / "refused", startup_timeout_s=30)
    try:
        endpoints = deployer.start_many([ServerSpec(arm, "m", "m", launcher, ["--fail-sized"], shares_gpu=True) for arm in "abc"])
        (a, _), (b, b_argv), (c, c_argv) = (started(endpoint) for endpoint in endpoints)
    finally:
        deployer.stop_all()
    assert b - a > 1.0 and c - b > 1.0 and "--kv-cache-memory-bytes" not in b_argv + c_argv
    assert "does not fit" in (tmp_path / "refused" / "b.sized-cache-failed.log").read_text()
