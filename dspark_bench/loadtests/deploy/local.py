"""Deployers: bring up one OpenAI-compatible endpoint per arm, and take every one down afterwards.

``LocalDeployer`` starts vLLM servers as subprocesses (the CPU build where there is no GPU), each in
its own process group, and guarantees none outlives the run: ``stop_all`` runs on normal exit,
exceptions, Ctrl-C and SIGTERM, and each server also gets SIGTERM if this process dies.
``ExternalDeployer`` only points at given base URLs; ``loadtests.gpustack_deploy.GPUStackDeployer`` creates
the arms as models on a GPUStack cluster.
"""

from __future__ import annotations

import atexit
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx


class DeployError(RuntimeError):
    """An arm could not be brought up; the message says why and how to fix it."""


@dataclass
class Endpoint:
    """A running arm: where to send requests, and how it was started."""

    arm: str
    base_url: str  # e.g. http://127.0.0.1:8000 (no /v1)
    model: str  # the name to put in the request's "model" field
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # the variables we set on top of the inherited env
    log_path: Path | None = None
    api_key: str | None = field(default=None, repr=False)  # headers only: never logged or saved
    process: subprocess.Popen | None = field(default=None, repr=False)

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass(frozen=True)
class ServerSpec:
    """How to start one arm's server locally."""

    arm: str
    model_path: str
    served_name: str
    launcher: list[str]  # e.g. [python, -m, vllm.entrypoints.openai.api_server]
    args: list[str]  # extra server flags (speculative config, prefix caching...)
    env: dict[str, str] = field(default_factory=dict)


class Deployer(Protocol):
    def start(self, spec: ServerSpec) -> Endpoint: ...

    def start_many(self, specs: Sequence[ServerSpec]) -> list[Endpoint]: ...

    def stop_all(self) -> None: ...


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_server_env(python: str = sys.executable) -> dict[str, str]:
    """Variables every local CPU arm gets alike (field notes: Intel OpenMP doubles speculative speed)."""
    env = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    libiomp = Path(python).resolve().parent.parent / "lib" / "libiomp5.so"
    venv_lib = Path(sys.prefix) / "lib" / "libiomp5.so"
    for candidate in (venv_lib, libiomp):
        if candidate.exists():
            env["LD_PRELOAD"] = str(candidate)
            break
    return env


def _die_with_parent() -> None:  # runs in the child between fork and exec
    os.setsid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def log_tail(path: Path | None, lines: int = 15) -> str:
    if path is None or not path.exists():
        return "(no log)"
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(text[-lines:])


# "ValueError: ...", "RuntimeError: ...", "dspark-serve: error: ...", after vLLM's "(Worker pid=1) ERROR ... [f.py:1]" prefix
_ERROR_MESSAGE = re.compile(r"(?:^|\s|\] )((?:[A-Za-z_][\w.]*(?:Error|Exception)|[\w-]+: error): \S.*)$")


def root_cause(log: str, latest: bool = False) -> str:
    """The one line of a failed server's log worth showing: the first exception message (at start-up the
    process that failed first logs it before the others report its failure; ``latest``: the last one,
    for a server that died after serving, whose earlier log may hold errors it survived), else the
    last line it printed."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in reversed(lines) if latest else lines:
        if match := _ERROR_MESSAGE.search(line):
            return match.group(1)
    printed = [line for line in lines if not line.startswith(("$ ", "# env:"))]  # LocalDeployer's header
    return printed[-1] if printed else "(the server printed nothing)"


def failure_summary(path: Path | None, latest: bool = False) -> str:
    """``root_cause`` of the log at ``path``, with where the whole log is."""
    if path is None or not path.exists():
        return "(no log)"
    return f"{root_cause(path.read_text(encoding='utf-8', errors='replace'), latest)} (whole log: {path})"


class LocalDeployer:
    """Starts vLLM OpenAI servers as subprocesses; ``stop_all`` (also via atexit/signals) stops them."""

    def __init__(self, log_dir: Path, startup_timeout_s: float = 600.0, host: str = "127.0.0.1") -> None:
        self.log_dir = log_dir
        self.startup_timeout_s = startup_timeout_s
        self.host = host
        self.endpoints: list[Endpoint] = []
        self._lock = threading.Lock()
        atexit.register(self.stop_all)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if threading.current_thread() is threading.main_thread():
                signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame) -> None:
        self.stop_all()
        raise SystemExit(128 + signum)

    def launch(self, spec: ServerSpec) -> Endpoint:
        """Start the server process without waiting for it to be ready."""
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
        log.write(f"$ {shlex.join(argv)}\n# env: {spec.env}\n")
        log.flush()
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **spec.env},
            preexec_fn=_die_with_parent,
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
                    f"arm '{endpoint.arm}': server exited with code {endpoint.process.returncode} before it was ready: "
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
        """Launch all servers at once (start-up overlaps), then wait for each."""
        endpoints = [self.launch(spec) for spec in specs]
        for endpoint in endpoints:
            self.wait_ready(endpoint)
        return endpoints

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


class ExternalDeployer:
    """Arms that already run somewhere: ``{arm: base_url}``; the API key comes from an environment variable."""

    def __init__(self, urls: dict[str, str], api_key_env: str = "OPENAI_API_KEY", model: str | None = None) -> None:
        self.urls, self.api_key = urls, os.environ.get(api_key_env)
        self.model = model

    def start(self, spec: ServerSpec) -> Endpoint:
        if spec.arm not in self.urls:
            raise DeployError(f"arm '{spec.arm}' has no URL; give --url {spec.arm}=http://host:port")
        base = self.urls[spec.arm].rstrip("/").removesuffix("/v1")
        endpoint = Endpoint(spec.arm, base, self.model or spec.served_name, api_key=self.api_key)
        try:
            response = httpx.get(f"{base}/v1/models", headers=endpoint.headers(), timeout=10)
            response.raise_for_status()
            served = [m["id"] for m in response.json().get("data", [])]
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise DeployError(
                f"arm '{spec.arm}': {base} is unreachable ({exc}); check the URL and that the server runs"
            ) from None
        if self.model is None and served:
            endpoint.model = served[0]
        return endpoint

    def start_many(self, specs: Sequence[ServerSpec]) -> list[Endpoint]:
        return [self.start(spec) for spec in specs]

    def stop_all(self) -> None:  # nothing of ours to stop
        return None
