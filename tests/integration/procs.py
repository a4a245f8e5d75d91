"""Shared check: a finished run left none of its servers running."""

import json
import subprocess
from pathlib import Path


def processes_on_port(port: str | int) -> str:
    """pids of processes whose command line holds ``--port PORT`` (``--`` ends pgrep's options: without it
    pgrep reads the pattern "--port N" as an option of its own and matches nothing)."""
    return subprocess.run(["pgrep", "-f", "--", f"--port {port}"], capture_output=True, text=True).stdout.strip()


def assert_no_server_left(run_dir: Path) -> None:
    results = json.loads((run_dir / "results.json").read_text())
    for arm in results["arms"].values():
        left = processes_on_port(arm["base_url"].rsplit(":", 1)[1])
        assert not left, f"orphan server processes: {left}"
