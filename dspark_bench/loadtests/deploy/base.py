"""What every deployer shares: the endpoint it returns, the spec it is given, its protocol, the guard
that takes the arms down however the run ends, and the one-line diagnosis of a server that failed.

Deployers (each returns one OpenAI-compatible ``Endpoint`` per arm and takes down what it started):
- ``local.LocalDeployer``: vLLM servers as subprocesses of this machine;
- ``external.ExternalDeployer``: servers already running at given URLs;
- ``gpustack.GPUStackDeployer``: one model per arm on a GPUStack cluster.
"""

from __future__ import annotations

import atexit
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
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

    def answers(self, timeout_s: float = 2.0) -> bool:
        """Whether anything answers HTTP at the server's address (its /health, any status) within ``timeout_s``."""
        try:
            httpx.get(f"{self.base_url}/health", headers=self.headers(), timeout=timeout_s)
        except httpx.HTTPError:
            return False
        return True

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def reset_prefix_cache(self, attempts: int = 5) -> bool:
        """Empty the server's prefix cache (vLLM's ``POST /reset_prefix_cache``, served in dev mode); False
        when the server has no such endpoint or would not empty it."""
        for _attempt in range(attempts):  # the reset fails while blocks are held (a request still finishing)
            try:
                response = httpx.post(f"{self.base_url}/reset_prefix_cache", headers=self.headers(), timeout=30.0)
            except httpx.HTTPError:
                return False
            if response.status_code != 200:
                return False
            try:
                if response.json().get("success", True):
                    return True
            except ValueError:
                return True  # older vLLM answers 200 with no body
            time.sleep(0.5)
        return False


@dataclass(frozen=True)
class ServerSpec:
    """How to start one arm's server: the run's common flags and the arm's own flags kept apart, so a
    deployer that maps them (GPUStack's backend_parameters) never slices a flat list by position."""

    arm: str
    model_path: str
    served_name: str
    launcher: list[str]  # e.g. [python, -m, vllm.entrypoints.openai.api_server]
    common_args: list[str] = field(default_factory=list)  # given to every arm of the run (dtype, context length)
    arm_args: list[str] = field(default_factory=list)  # this arm's own (speculative config, DSpark flags...)
    env: dict[str, str] = field(default_factory=dict)
    cpus: frozenset[int] = frozenset()  # a local server's CPUs (RunConfig.server_cpus); empty: any
    # It shares a GPU with the run's other servers. vLLM sizes its KV cache from the GPU memory free while it
    # profiles, which a neighbour allocating its own cache then takes (on an H200 three servers started
    # together: "Available KV cache memory: -39.72 GiB"): the first starts alone, the others with the cache
    # it measured (LocalDeployer.start_many).
    shares_gpu: bool = False

    @property
    def args(self) -> list[str]:
        return [*self.common_args, *self.arm_args]


class Deployer(Protocol):
    def start_many(self, specs: Sequence[ServerSpec]) -> list[Endpoint]: ...

    def stop_all(self) -> None: ...


class ExitGuard:
    """Runs ``stop`` once however the process ends: normal exit (atexit), SIGTERM and SIGHUP (then exits
    128 + signal), or an explicit call. Signal handlers can only be set from the main thread.

    Under gevent (the harness: Locust patches the standard library) the signals are left to
    ``signals_to_main_greenlet``: a handler raising wherever the signal lands could raise inside gevent's
    hub, which cannot unwind a run."""

    def __init__(self, stop: Callable[[], None]) -> None:
        self._stop = stop
        atexit.register(stop)
        if threading.current_thread() is threading.main_thread() and not _gevent_patched():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame) -> None:
        self._stop()
        raise SystemExit(128 + signum)


def _gevent_patched() -> bool:
    try:
        from gevent import monkey
    except ImportError:
        return False
    return monkey.is_module_patched("socket")


def signals_to_main_greenlet() -> None:
    """Under gevent: Ctrl-C raises KeyboardInterrupt, SIGTERM and SIGHUP raise SystemExit(128 + signal), in
    the calling (main) greenlet wherever it waits, so its ``finally`` blocks stop the arms and write what
    was measured."""
    import gevent

    main = gevent.getcurrent()
    gevent.signal_handler(signal.SIGINT, main.throw, KeyboardInterrupt)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        gevent.signal_handler(sig, main.throw, SystemExit(128 + sig))


def log_tail(text_or_path: str | Path | None, lines: int = 15) -> str:
    """The last ``lines`` lines of a log, given as its text or its path."""
    if text_or_path is None:
        return "(no log)"
    if isinstance(text_or_path, Path):
        if not text_or_path.exists():
            return "(no log)"
        text_or_path = text_or_path.read_text(encoding="utf-8", errors="replace")
    return "\n".join(str(text_or_path).splitlines()[-lines:])


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
