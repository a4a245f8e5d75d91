"""``load_scenario``: a built-in name, a scenario YAML (a generator, or ``dataset: PATH``), a dataset
file or folder of the user's own requests, a file of agent sessions, or a trace (requests with arrival
times). The one entry point; raises ScenarioError."""

from __future__ import annotations

from pathlib import Path

from dspark_bench.files import FileProblem, read_yaml_mapping
from dspark_bench.scenarios.dataset import is_dataset_path, load_dataset
from dspark_bench.scenarios.session import is_session_file, load_sessions
from dspark_bench.scenarios.spec import DEFS_DIR, Scenario, ScenarioError, builtin_names, parse_scenario_yaml
from dspark_bench.scenarios.trace import is_trace, load_trace


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a built-in scenario by name, or any scenario or dataset file by path; raises ScenarioError."""
    path = Path(name_or_path)
    if is_dataset_path(path):
        return _load_file(path)
    if path.suffix not in (".yaml", ".yml"):
        path = DEFS_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            raise ScenarioError(
                name_or_path,
                "name",
                "no such scenario",
                f"use one of {', '.join(builtin_names())}, a scenario .yaml, or a dataset (.jsonl, .json, .csv)",
            )
    try:
        raw = read_yaml_mapping(path)
    except FileProblem as exc:
        raise ScenarioError(path, "(file)", exc.problem, exc.fix) from None
    if not raw:
        raise ScenarioError(path, "(file)", "the file is empty", "write 'name: ...', 'generator: ...' keys")
    if "dataset" in raw:  # a scenario YAML that names a data file: {dataset: PATH, name, description}
        if unknown := sorted(set(raw) - {"dataset", "name", "description"}):
            raise ScenarioError(path, unknown[0], "not a key of a dataset scenario", "keep dataset, name, description")
        return _load_file((path.parent / str(raw["dataset"])).resolve(), raw.get("name"), raw.get("description"))
    return parse_scenario_yaml(path, raw)


def _load_file(path: Path, name: str | None = None, description: str | None = None) -> Scenario:
    """A data file by what its rows hold: arrival times (a trace), turns (agent sessions), or requests."""
    if path.is_file() and is_trace(path):
        return load_trace(path, load_scenario)
    if is_session_file(path):
        return load_sessions(path, name, description)
    return load_dataset(path, name, description)


def load_all() -> list[Scenario]:
    """Every built-in scenario."""
    return [load_scenario(name) for name in builtin_names()]
