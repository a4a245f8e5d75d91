"""Reading the project's YAML files (run configs, scenarios, thresholds, GPUStack model files): one loader,
so every file that cannot be read fails the same way, with the path and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class FileProblem(ValueError):
    """A file that cannot be read as a mapping; each caller re-raises it as its own error type."""

    def __init__(self, path: Path, problem: str, fix: str) -> None:
        self.path, self.problem, self.fix = path, problem, fix
        super().__init__(f"{path}: {problem}; fix: {fix}")


def read_yaml_mapping(path: str | Path, example: str = "see the examples in the repository") -> dict[str, Any]:
    """The YAML mapping in ``path`` (an empty file reads as {}); ``example`` goes into the fix of a file
    whose top level is not a mapping."""
    path = Path(path)
    if not path.is_file():
        raise FileProblem(path, "file not found", "check the path")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise FileProblem(path, f"not valid YAML ({' '.join(str(exc).split())})", "correct the syntax") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FileProblem(path, f"cannot be read ({exc})", "check the file") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise FileProblem(path, "the top level is not a mapping of settings", example)
    return raw
