"""A real GPUStack 2.x server for the tests: its own venv (``make test`` installs it), PostgreSQL from Debian.

Started without a worker (none can join here: GPUStack workers run engines in containers on GPU
machines), so instances stay ``pending`` with the scheduler's reason. Everything lives in a temporary
folder; both servers are stopped, as whole process groups, when the context exits.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from dspark_bench.loadtests.config import REPO_ROOT
from dspark_bench.loadtests.deploy.base import log_tail
from dspark_bench.loadtests.deploy.local import free_port

from .postgres_server import PostgresServer, PostgresUnavailable, running_postgres


class GPUStackUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class GPUStackServer:
    url: str
    api_key: str
    admin_password: str
    cluster_id: int


def gpustack_binary() -> Path:
    path = Path(os.environ.get("GPUSTACK_BIN", REPO_ROOT / ".venv-gpustack" / "bin" / "gpustack"))
    if not path.exists():
        raise GPUStackUnavailable(f"{path} not found: `make test` installs GPUStack into .venv-gpustack (make gpustack)")
    return path


def _stop_group(process: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def running_gpustack(startup_timeout_s: float = 180.0) -> Iterator[GPUStackServer]:
    binary = gpustack_binary()
    try:
        with running_postgres("gpustack", prefix="dspark-gpustack-") as postgres:
            yield from _gpustack_on(binary, postgres, startup_timeout_s)
    except PostgresUnavailable as exc:
        raise GPUStackUnavailable(str(exc)) from None


def _gpustack_on(binary: Path, postgres: PostgresServer, startup_timeout_s: float) -> Iterator[GPUStackServer]:
    workdir, server = postgres.workdir, None
    try:
        password = "Bench-" + secrets.token_hex(8)
        port, api_port, metrics_port = free_port(), free_port(), free_port()
        log_path = workdir / "gpustack.log"
        argv = [str(binary), "start", "--database-url", postgres.url("gpustack"),
                "--gateway-mode", "disabled", "--disable-worker", "--data-dir", str(workdir / "data"),
                "--port", str(port), "--api-port", str(api_port), "--metrics-port", str(metrics_port),
                "--bootstrap-password", password, "--disable-builtin-observability", "--disable-update-check"]  # fmt: skip
        with log_path.open("w") as log:
            server = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        url = f"http://127.0.0.1:{api_port}"
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if server.poll() is not None:
                raise GPUStackUnavailable(f"gpustack exited with {server.returncode}:\n{log_tail(log_path)}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise GPUStackUnavailable(f"gpustack not healthy after {startup_timeout_s:.0f}s:\n{log_tail(log_path)}")
            time.sleep(1)
        admin = httpx.Client(base_url=url, auth=("admin", password), timeout=30)
        key = admin.post("/v2/api-keys", json={"name": "bench-tests"}).raise_for_status().json()["value"]
        cluster = admin.post("/v2/clusters", json={"name": "bench", "provider": "Docker"}).raise_for_status().json()
        admin.close()
        yield GPUStackServer(url, key, password, int(cluster["id"]))
    finally:
        if server is not None:
            _stop_group(server)
