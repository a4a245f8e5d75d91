"""``make test``: the whole suite as two pytest processes side by side, so that it fits 12 minutes on 2 cores.

The integration tests mostly wait on the real servers they start (vLLM's start-up, GPUStack, PostgreSQL) and
the unit tests mostly on their fakes, so the two overlap well; one pytest process cannot overlap them
(pytest-xdist's workers deadlock under gevent's patched threads). The integration process runs at the lowest
CPU priority (SCHED_IDLE): its servers take the CPU the unit tests leave, and the unit tests whose timing is
the behaviour under test keep the CPU when they need it (at equal priority, six vLLM servers booting beside
them delayed a trace replay by 0.7 s; at nice 10, open-loop sends by 0.36 s).

    python -m tests.suite [PYTEST_ARGS...]      e.g. --durations=15, -x, -k NAME

The integration tests print to the terminal as they run; the unit tests write to ``build/test-unit.log``,
whose failures, slowest tests and summary follow once both have ended. The exit status is non-zero when
either failed (pytest's own codes; "no tests collected" counts as passed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

UNIT_LOG = Path("build") / "test-unit.log"
NO_TESTS = 5  # pytest's exit code when the selection is empty


def _idle() -> None:  # runs in the integration process between fork and exec; its children inherit it
    """Linux's SCHED_IDLE: the CPU only when nothing else wants it. nice 10 was not enough: six servers booting
    at CFS weight 110 each against a unit test's 1024 still took 40% of a core, and open-loop send lags failed."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux: the lowest niceness instead
        os.nice(19)


def _pytest(marks: str, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-m", marks, *args]


def _passed(code: int) -> bool:
    return code in (0, NO_TESTS)


def _status(code: int) -> int:
    """An exit status for ``code``: a process a signal ended (negative) as a shell reports it, 128 + the signal."""
    return code if code >= 0 else 128 - code


def _report(log: Path) -> str:
    """The unit run's log from its first failure section or its slowest tests on: what is worth reading."""
    text = log.read_text(encoding="utf-8", errors="replace")
    for heading in ("= FAILURES =", "= ERRORS =", "slowest", "short test summary"):
        if (at := text.find(heading)) >= 0:
            return text[text.rfind("\n", 0, at) + 1 :]
    return text[-4000:]


def main(args: list[str]) -> int:
    UNIT_LOG.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with UNIT_LOG.open("w", encoding="utf-8") as log:
        unit = subprocess.Popen(_pytest("not integration", args), stdout=log, stderr=subprocess.STDOUT)
        integration = subprocess.Popen(_pytest("integration", args), preexec_fn=_idle)

        def forward(signum: int, _frame: object) -> None:  # SIGTERM (a CI timeout): each stops its servers
            for process in (unit, integration):
                if process.poll() is None:
                    process.send_signal(signum)

        signal.signal(signal.SIGTERM, forward)
        while True:
            try:
                codes = integration.wait(), unit.wait()
                break
            except KeyboardInterrupt:  # Ctrl-C reached both through the terminal: let them stop their servers
                continue
    elapsed = time.monotonic() - started
    print(f"\n===== unit tests (not integration), from {UNIT_LOG} =====\n{_report(UNIT_LOG)}", end="")
    integration_code, unit_code = codes
    verdict = "passed" if _passed(unit_code) and _passed(integration_code) else "FAILED"
    print(f"make test {verdict} in {elapsed:.0f} s: unit tests exit {unit_code}, integration tests exit {integration_code}")
    return 0 if verdict == "passed" else _status(integration_code if not _passed(integration_code) else unit_code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
