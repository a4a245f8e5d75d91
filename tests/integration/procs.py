"""Shared check: a finished run left none of its servers running."""

import json
import subprocess
from pathlib import Path


def assert_no_server_left(run_dir: Path) -> None:
    results = json.loads((run_dir / "results.json").read_text())
    for arm in results["arms"].values():
        port = arm["base_url"].rsplit(":", 1)[1]
        left = subprocess.run(["pgrep", "-f", f"--port {port}"], capture_output=True, text=True).stdout.strip()
        assert not left, f"orphan server processes: {left}"
