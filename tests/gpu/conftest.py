"""GPU tests: real vLLM servers on a real GPU (``make test-gpu``); skipped on a machine without one."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def _has_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU here (nvidia-smi -L fails): GPU tests run with make test-gpu on a GPU host")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
