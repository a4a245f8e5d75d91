"""Local arms: vLLM servers started as subprocesses of this machine (the CPU build where there is no GPU).

Each server runs in its own process group and none outlives the run: ``stop_all`` runs on normal exit,
exceptions, Ctrl-C and SIGTERM (``base.ExitGuard``), and each server also gets SIGTERM if this process
dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import httpx

from dspark_bench.loadtests.deploy.base import DeployError, Endpoint, ExitGuard, ServerSpec, failure_summary, log_tail


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_server_env(python: str = sys.executable) -> dict[str, str]:
    """Variables every local CPU arm gets alike (field notes: Intel OpenMP doubles speculative speed). Dev
    mode serves ``/reset_prefix_cache``, which the sweep calls before every level."""
    env = {
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
        "VLLM_SERVER_DEV_MODE": "1",
        # vLLM 0.32 on a CPU saves its AOT-compiled model but cannot load it back ("Compiling model again due to
        # a load failure ... has no attribute 'finalize_loading'"), so every start compiled from scratch; its
        # older compile cache loads: a restart's warm-up 6 s instead of 18 s on 2 cores, the same compiled model
        "VLLM_USE_AOT_COMPILE": "0",
    }
    libiomp = Path(python).resolve().parent.parent / "lib" / "libiomp5.so"
    venv_lib = Path(sys.prefix) / "lib" / "libiomp5.so"
    for candidate in (venv_lib, libiomp):
        if candidate.exists():
            env["LD_PRELOAD"] = str(candidate)
            break
    return env


def die_with_parent() -> None:  # a preexec_fn: runs in the child between fork and exec
    """The child gets SIGTERM if its parent dies without stopping it (SIGKILL, a crash)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _die_with_parent() -> None:  # runs in the child between fork and exec
    os.setsid()
    die_with_parent()


def _placed(cpus: frozenset[int]) -> None:  # runs in the child between fork and exec
    """The server and every process it starts run on ``cpus`` only."""
    _die_with_parent()
    os.sched_setaffinity(0, cpus)



def require_launcher(spec: ServerSpec) -> None:
    """A ``python -m MODULE`` launcher whose module is not installed here (dspark-serve is a distribution of its
    own) stops the run with the fix, before a server that cannot start is waited for."""
    import importlib.util

    launcher = list(spec.launcher)
    if launcher[:2] == [sys.executable, "-m"] and len(launcher) > 2:  # this Python: what it can import is known here
        module = launcher[2]
        if importlib.util.find_spec(module.split(".")[0]) is None:
            fix = "pip install ./engine (make install does)" if module.startswith("dspark_serve") else f"install {module}"
            raise DeployError(f"arm '{spec.arm}': its server is python -m {module}, which is not installed here; fix: {fix}")


KV_CACHE_MEASURED = re.compile(r"Available KV cache memory: (-?[\d.]+) GiB")
KV_CACHE_FLAGS = ("--kv-cache-memory-bytes", "--kv-cache-memory")
KV_CACHE_SHARE = 0.95  # of what the first measured: an arm with a draft model holds its weights beside the cache


def kv_cache_bytes(log: str) -> int | None:
    """The KV cache vLLM sized for itself when it profiled GPU memory alone, from its log, as the bytes that
    a neighbour of the same model gets (``KV_CACHE_SHARE`` of it); None where the log gives none. Pure."""
    found = KV_CACHE_MEASURED.findall(log)
    return int(float(found[-1]) * 2**30 * KV_CACHE_SHARE) if found and float(found[-1]) > 0 else None


def with_kv_cache(spec: ServerSpec, kv_bytes: int) -> ServerSpec:
    """``spec`` with a KV cache of ``kv_bytes``, unless its arguments size the cache already. Pure."""
    if any(arg.split("=", 1)[0] in KV_CACHE_FLAGS for arg in spec.args):
        return spec
    return replace(spec, arm_args=[*spec.arm_args, "--kv-cache-memory-bytes", str(kv_bytes)])


class LocalDeployer:
    """Starts vLLM OpenAI servers as subprocesses; ``stop_all`` (also via atexit/signals) stops them."""

    def __init__(self, log_dir: Path, startup_timeout_s: float = 600.0, host: str = "127.0.0.1") -> None:
        self.log_dir = log_dir
        self.startup_timeout_s = startup_timeout_s
        self.host = host
        self.endpoints: list[Endpoint] = []
        self._lock = threading.Lock()
        self._guard = ExitGuard(self.stop_all)

    def launch(self, spec: ServerSpec) -> Endpoint:
        """Start the server process without waiting for it to be ready."""
        require_launcher(spec)
        port = free_port()
        argv = [
            *spec.launcher,
            "--model",
            spec.model_path,
            "--served-model-name",
            spec.served_name,
            "--host",
            self.host,
            "--port",
            str(port),
            *spec.args,
        ]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{spec.arm}.log"
        log = log_path.open("w", encoding="utf-8")
        log.write(f"$ {shlex.join(argv)}\n# env: {spec.env}\n" + (f"# CPUs: {sorted(spec.cpus)}\n" if spec.cpus else ""))
        log.flush()
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **spec.env},
            preexec_fn=(lambda: _placed(spec.cpus)) if spec.cpus else _die_with_parent,
        )
        endpoint = Endpoint(
            spec.arm, f"http://{self.host}:{port}", spec.served_name, argv, dict(spec.env), log_path, process=process
        )
        with self._lock:
            self.endpoints.append(endpoint)
        return endpoint

    def wait_ready(self, endpoint: Endpoint) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if not endpoint.alive():
                raise DeployError(
                    f"arm '{endpoint.arm}': server exited with code {endpoint.process and endpoint.process.returncode} before it was ready: "
                    f"{failure_summary(endpoint.log_path)}"
                )
            try:
                if httpx.get(f"{endpoint.base_url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise DeployError(
            f"arm '{endpoint.arm}': /health not ready after {self.startup_timeout_s:.0f}s "
            f"(raise --startup-timeout on a slow machine); log {endpoint.log_path}:\n{log_tail(endpoint.log_path)}"
        )

    def start(self, spec: ServerSpec) -> Endpoint:
        endpoint = self.launch(spec)
        self.wait_ready(endpoint)
        return endpoint

    def start_many(self, specs: Sequence[ServerSpec]) -> list[Endpoint]:
        """Launch the servers at once (start-up overlaps), then wait for each. Servers that share a GPU
        (``ServerSpec.shares_gpu``): vLLM sizes its KV cache from the memory free while it profiles, and a
        neighbour allocating meanwhile takes it. So the first starts alone, and the others of its model then
        start together with the KV cache it measured (``--kv-cache-memory-bytes``: vLLM skips that profile); one
        that does not start so starts again alone. Where the first's log gives no figure, or a server runs
        another model, one after another as before."""
        endpoints: dict[int, Endpoint] = {}
        sized: set[int] = set()
        first = next((i for i, spec in enumerate(specs) if spec.shares_gpu), None)
        kv_bytes = None
        if first is not None:
            endpoints[first] = self.start(specs[first])
            log = endpoints[first].log_path
            kv_bytes = kv_cache_bytes(log.read_text(encoding="utf-8", errors="replace")) if log else None
        for i, spec in enumerate(specs):
            if i in endpoints:
                continue
            if spec.shares_gpu and kv_bytes and first is not None and spec.model_path == specs[first].model_path:
                endpoints[i] = self.launch(with_kv_cache(spec, kv_bytes))
                sized.add(i)
            elif spec.shares_gpu:
                endpoints[i] = self.start(spec)
            else:
                endpoints[i] = self.launch(spec)
        failed = []
        for i in sorted(endpoints):
            try:
                self.wait_ready(endpoints[i])
            except DeployError:
                if i not in sized:
                    raise
                failed.append(i)
        for i in failed:  # the given cache did not start it: alone, profiling as before (its log kept beside)
            self.stop(endpoints[i])
            if (log := endpoints[i].log_path) is not None:
                log.replace(log.with_name(f"{specs[i].arm}.sized-cache-failed.log"))
            endpoints[i] = self.start(specs[i])
        return [endpoints[i] for i in range(len(specs))]

    def stop(self, endpoint: Endpoint, grace_s: float = 15.0) -> None:
        process = endpoint.process
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # the engine core may linger after the API server exits: sweep the whole group
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop_all(self) -> None:
        with self._lock:
            endpoints, self.endpoints = self.endpoints, []
        for endpoint in endpoints:
            self.stop(endpoint)


