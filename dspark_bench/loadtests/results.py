"""A run's results: the typed model of ``results.json``, its one writer and its one loader, and ``levels.csv``.

``results.json`` holds the config, the machine, each arm's exact argv and environment, and one entry
per (arm, scenario, level, repeat): its metrics (``metrics.LevelMetrics``), its health
(``metrics.LevelHealth``: did it hold its load, what ran beside it) and its server counter deltas. It
is rewritten after every level, ``"complete": false`` with the error if the run stopped early.
``levels.csv`` is the same levels as one row each (``levels_frame``).

The file carries ``schema`` (``RESULTS_SCHEMA``). Schema 1, the files without it, kept a level's health
inside its metrics (``level_valid``, ``level_problems``, ``incomplete``, ...); the loader reads both.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from dspark_bench.loadtests.arms import Arm
from dspark_bench.loadtests.capacity import CapacityResult
from dspark_bench.loadtests.config import RunConfig, settings
from dspark_bench.loadtests.deploy.base import Endpoint
from dspark_bench.loadtests.deploy.engine_log import EngineFacts, engine_facts
from dspark_bench.loadtests.machine import MachineFacts, machine_facts
from dspark_bench.loadtests.metrics import LevelHealth, LevelMetrics, level_metrics, level_warnings
from dspark_bench.loadtests.records import read_records
from dspark_bench.scenarios import Mode

RESULTS_SCHEMA = 2


class ResultsError(ValueError):
    """A results.json that cannot be read as a run's results; the message names the file and why."""


@dataclass(frozen=True)
class ArmFacts:
    """How an arm ran: where, which model, the exact argv and environment, its log, its JSON mode."""

    base_url: str
    model: str
    argv: list[str] = field(default_factory=list)  # empty: a server this run did not start (--url)
    env: dict[str, str] = field(default_factory=dict)
    log: str | None = None
    mode: str = ""
    description: str = ""
    engine: EngineFacts = field(default_factory=EngineFacts)  # how its server says it runs (its log; empty: no log)


def arm_facts(config: RunConfig, endpoint: Endpoint) -> ArmFacts:
    arm = config.arm(endpoint.arm)
    log = endpoint.log_path
    return ArmFacts(
        base_url=endpoint.base_url,
        model=endpoint.model,
        argv=endpoint.argv,
        env=dict(endpoint.env or {}),
        log=str(endpoint.log_path) if endpoint.log_path else None,
        mode=config.arm_mode(arm).value,
        description=arm.description,
        engine=engine_facts(log.read_text(encoding="utf-8", errors="replace")) if log and log.is_file() else EngineFacts(),
    )


def _arm(raw: dict[str, Any]) -> ArmFacts:
    facts = _known(ArmFacts, raw)
    return replace(facts, engine=_known(EngineFacts, raw.get("engine") or {}))


@dataclass
class LevelResult:
    arm: str
    scenario: str
    mode: str
    level: float  # users of a closed loop, requests per second of an open one
    repeat: int
    metrics: LevelMetrics
    health: LevelHealth = field(default_factory=LevelHealth)
    server: dict[str, float] = field(default_factory=dict)  # server counter deltas over the level

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunResults:
    run_dir: Path
    config: RunConfig
    arms: dict[str, ArmFacts] = field(default_factory=dict)
    levels: list[LevelResult] = field(default_factory=list)
    started: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    finished: str | None = None
    complete: bool = False
    error: str | None = None
    source: str | None = None  # how the levels were formed, when not by a sweep
    capacity: list[CapacityResult] = field(default_factory=list)  # --find-capacity: each (arm, scenario)'s search
    machine: MachineFacts = field(default_factory=machine_facts)
    server_pgids: dict[str, int] = field(default_factory=dict)  # arm -> its server's process group; not saved

    def as_dict(self) -> dict[str, Any]:
        results: dict[str, Any] = {
            "schema": RESULTS_SCHEMA,
            "complete": self.complete,
            "error": self.error,
            "started": self.started,
            "finished": self.finished,
            "config": asdict(self.config),
            "machine": self.machine.as_dict(),
            "arms": {name: asdict(facts) for name, facts in self.arms.items()},
            "levels": [level.as_dict() for level in self.levels],
        }
        if self.source:
            results["source"] = self.source
        if self.capacity:
            results["capacity"] = [asdict(search) for search in self.capacity]
        return results

    def write(self) -> Path:
        """results.json (atomically) and levels.csv."""
        self.finished = datetime.now(UTC).isoformat(timespec="seconds")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        path = self.run_dir / "results.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.as_dict(), indent=1, ensure_ascii=False, default=str), encoding="utf-8")
        tmp.replace(path)
        levels_frame(self).to_csv(self.run_dir / "levels.csv", index=False)
        return path

    @classmethod
    def from_dict(cls, raw: dict[str, Any], run_dir: Path | str = ".") -> RunResults:
        """The typed results of a results.json's data, any schema up to ``RESULTS_SCHEMA``."""
        schema = raw.get("schema", 1)
        if not isinstance(schema, int) or schema > RESULTS_SCHEMA:
            raise ResultsError(f"schema {schema!r} is newer than this dspark-bench reads ({RESULTS_SCHEMA}); upgrade it")
        if not isinstance(raw.get("levels"), list):
            raise ResultsError("no list of levels: not the results of a 'bench' or 'ui' run")
        return cls(
            run_dir=Path(run_dir),
            config=saved_config(raw.get("config") or {}),
            arms={name: _arm(facts) for name, facts in (raw.get("arms") or {}).items()},
            levels=[_level(row, schema) for row in raw["levels"]],
            started=str(raw.get("started", "")),
            finished=raw.get("finished"),
            complete=bool(raw.get("complete")),
            error=raw.get("error"),
            source=raw.get("source"),
            capacity=[CapacityResult.from_dict(search) for search in raw.get("capacity") or []],
            machine=MachineFacts.from_dict(raw.get("machine") or {}),
        )


def _known(cls: type, raw: dict[str, Any]) -> Any:
    """``cls`` from the keys of ``raw`` it declares (keys a later or earlier version wrote are left out)."""
    names = {f.name for f in fields(cls)}
    return cls(**{key: value for key, value in raw.items() if key in names})


HEALTH_COLUMNS = tuple(f.name for f in fields(LevelHealth))  # levels_frame's columns for a level's health


# Schema 1 kept a level's health inside its metrics, under LevelHealth's names but for these two.
_V1_RENAMED = {"level_valid": "valid", "level_problems": "problems"}


def _level(row: dict[str, Any], schema: int) -> LevelResult:
    metrics = dict(row["metrics"])
    if schema == 1:
        health = {
            _V1_RENAMED.get(key, key): metrics.pop(key) for key in list(metrics) if _V1_RENAMED.get(key, key) in HEALTH_COLUMNS
        }
        health["problems"] = [p for p in str(health.get("problems") or "").split("; ") if p]
    else:
        health = dict(row.get("health") or {})
    health["problems"] = tuple(health.get("problems") or ())
    health["warnings"] = tuple(health.get("warnings") or ())
    if health.get("gpu_other_processes") is not None:
        health["gpu_other_processes"] = tuple(health["gpu_other_processes"])
    try:
        return LevelResult(
            arm=str(row["arm"]),
            scenario=str(row["scenario"]),
            mode=str(row.get("mode", "")),
            level=row["level"] if isinstance(row["level"], int | float) else float(row["level"]),
            repeat=int(row.get("repeat", 0)),
            metrics=_known(LevelMetrics, metrics),
            health=_known(LevelHealth, health),
            server={str(k): float(v) for k, v in (row.get("server") or {}).items()},
        )
    except (KeyError, TypeError) as exc:
        raise ResultsError(f"a level of arm {row.get('arm')!r} lacks {exc}") from None


def saved_config(raw: dict[str, Any]) -> RunConfig:
    """The config a run recorded, typed as written (not re-checked: its model folder may be gone). Settings
    a later version retired are left out; those it added take their defaults."""
    values: dict[str, Any] = {}
    for name, spec in settings().items():
        if name not in raw:
            continue
        value = raw[name]
        if spec.is_list and isinstance(value, list):
            value = tuple(value)
        values[name] = value
    if "mode" in values:
        values["mode"] = Mode(values["mode"])
    for name in ("level_repeats", "level_requests"):  # JSON wrote their levels as text
        if name in values:
            values[name] = {int(level): int(count) for level, count in values[name].items()}
    values["custom_arms"] = tuple(
        Arm(**{**arm, "server_args": tuple(arm.get("server_args") or ()), "mode": Mode(arm["mode"]) if arm.get("mode") else None,
               "gpu_server_args": None if arm.get("gpu_server_args") is None else tuple(arm["gpu_server_args"])})
        for arm in values.get("custom_arms", ())
    )
    return RunConfig(**values)


def results_from_records(run_dir: Path, config: RunConfig, arms: dict[str, ArmFacts]) -> RunResults:
    """Results of a Locust-driven run (web UI, master/worker): one level per (arm, scenario, mode, user
    count) seen in the run folder's records."""
    groups = defaultdict(list)
    for record in read_records(run_dir):
        groups[(record.arm, record.scenario, record.mode, record.level)].append(record)
    results = RunResults(
        run_dir,
        config,
        arms=arms,
        started=run_dir.name,
        complete=True,
        source="Locust web UI run (levels are the user counts each answer was recorded at)",
    )
    results.levels = [
        LevelResult(arm, scenario, mode, level, 0, level_metrics(rows, config.slo))
        for (arm, scenario, mode, level), rows in sorted(groups.items())
    ]
    return results


def load_results(run_dir: str | Path) -> RunResults:
    """A saved run's typed results (given its folder or its results.json); ResultsError naming the file."""
    path = Path(run_dir)
    path = path / "results.json" if path.is_dir() else path
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{path}: cannot read it ({exc})") from None
    if not isinstance(raw, dict):
        raise ResultsError(f"{path}: not a JSON object")
    try:
        return RunResults.from_dict(raw, path.parent)
    except ResultsError as exc:
        raise ResultsError(f"{path}: {exc}") from None


def levels_frame(results: RunResults) -> pd.DataFrame:
    """One row per (arm, scenario, mode, level, repeat): its metrics, its health (``HEALTH_COLUMNS``; problems
    joined by '; '), then its server counters as ``server:<name>``. Every column is there for every run."""
    rows = []
    for level in results.levels:
        row: dict[str, Any] = {"arm": level.arm, "scenario": level.scenario, "mode": level.mode, "level": level.level}
        row["repeat"] = level.repeat
        row.update(asdict(level.metrics))
        row.update(asdict(level.health))
        row["problems"] = "; ".join(level.health.problems)
        row["warnings"] = "; ".join(level.health.warnings or level_warnings(level.metrics, results.config.cost_only))  # runs from before the field too
        row.update({f"server:{k}": v for k, v in level.server.items()})
        rows.append(row)
    columns = ["arm", "scenario", "mode", "level", "repeat", *(f.name for f in fields(LevelMetrics)), *HEALTH_COLUMNS]
    return pd.DataFrame(rows, columns=list(dict.fromkeys([*columns, *(k for row in rows for k in row)])))


def measurements(rows: pd.DataFrame) -> pd.DataFrame:
    """The ``levels_frame`` rows of levels that were measurements: a level that was not (``valid`` False)
    pairs with nothing in a ratio between arms; ``valid`` None is a run before the checks."""
    return rows[rows["valid"] != False] if "valid" in rows else rows  # noqa: E712


def by_repeat(rows: pd.DataFrame, column: str) -> dict[int, float]:
    """``column`` of some ``levels_frame`` rows (one arm, scenario and level) by repeat number: what paired
    ratios between arms are taken over; a repeat without the figure (None, NaN) is left out."""
    return {int(repeat): float(value) for repeat, value in zip(rows["repeat"], rows[column], strict=True) if pd.notna(value)}
