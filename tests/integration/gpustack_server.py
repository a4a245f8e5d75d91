"""A real GPUStack 2.x server for the tests: its own venv (``make test`` installs it), PostgreSQL from Debian.

Started without a worker (none can join here: GPUStack workers run engines in containers on GPU
machines), so instances stay ``pending`` with the scheduler's reason. Everything lives in a temporary
folder; both servers are stopped, as whole process groups, when the context exits.
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from dspark_bench.loadtests.config import REPO_ROOT
from dspark_bench.loadtests.deploy.base import log_tail
from dspark_bench.loadtests.deploy.local import free_port


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


def postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise GPUStackUnavailable("PostgreSQL server not found: `make test` installs Debian's postgresql (make gpustack)")
    return Path(found[-1]).parent


def _as_postgres(argv: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root; CI runs as root
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _stop_group(process: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise GPUStackUnavailable(f"{' '.join(argv)} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")


@contextlib.contextmanager
def running_gpustack(startup_timeout_s: float = 180.0) -> Iterator[GPUStackServer]:
    binary, pg = gpustack_binary(), postgres_bin()
    # not under pytest's tmp_path: its root-only parents would shut the postgres user out
    workdir = Path(tempfile.mkdtemp(prefix="dspark-gpustack-"))
    pg_dir, pg_port = workdir / "pg", free_port()
    pg_dir.mkdir()
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres")
        shutil.chown(pg_dir, "postgres")
    _run(_as_postgres([str(pg / "initdb"), "-D", str(pg_dir), "-A", "trust", "-U", "postgres"]))
    pg_options = f"-p {pg_port} -k {workdir} -c listen_addresses=127.0.0.1"
    pg_ctl = [str(pg / "pg_ctl"), "-D", str(pg_dir), "-l", str(workdir / "postgres.log")]
    _run(_as_postgres([*pg_ctl, "-o", pg_options, "-w", "start"]))
    server = None
    try:
        _run(_as_postgres([str(pg / "createdb"), "-h", "127.0.0.1", "-p", str(pg_port), "-U", "postgres", "gpustack"]))
        password = "Bench-" + secrets.token_hex(8)
        port, api_port, metrics_port = free_port(), free_port(), free_port()
        log_path = workdir / "gpustack.log"
        argv = [str(binary), "start", "--database-url", f"postgresql://postgres@127.0.0.1:{pg_port}/gpustack",
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
        subprocess.run(_as_postgres([*pg_ctl, "-m", "fast", "stop"]), capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)
