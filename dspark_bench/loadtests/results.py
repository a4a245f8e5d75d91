"""A run's results: the one writer (and reader) of ``results.json`` and ``levels.csv``.

``results.json`` holds the config, the machine, each arm's exact argv and environment, and one entry
per (arm, scenario, level, repeat) with its metrics (``metrics.LevelMetrics``) and server counter
deltas. It is rewritten after every level, ``"complete": false`` with the error if the run stopped
early. ``levels.csv`` is the same levels as one row each (``levels_frame``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from dspark_bench.loadtests.config import RunConfig
from dspark_bench.loadtests.deploy.base import Endpoint
from dspark_bench.loadtests.machine import machine_facts
from dspark_bench.loadtests.metrics import level_metrics
from dspark_bench.loadtests.records import read_records


@dataclass
class LevelResult:
    arm: str
    scenario: str
    mode: str
    level: int
    repeat: int
    metrics: dict[str, Any]
    server: dict[str, float] = field(default_factory=dict)


def arm_facts(config: RunConfig, endpoint: Endpoint) -> dict[str, Any]:
    """How an arm ran: where, which model, the exact argv and environment, its log, its JSON mode."""
    arm = config.arm(endpoint.arm)
    return {
        "base_url": endpoint.base_url,
        "model": endpoint.model,
        "argv": endpoint.argv,
        "env": endpoint.env,
        "log": str(endpoint.log_path) if endpoint.log_path else None,
        "mode": config.arm_mode(arm).value,
        "description": arm.description,
    }


@dataclass
class RunResults:
    run_dir: Path
    config: RunConfig
    arms: dict[str, dict[str, Any]] = field(default_factory=dict)  # arm -> arm_facts
    levels: list[LevelResult] = field(default_factory=list)
    started: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    complete: bool = False
    error: str | None = None
    source: str | None = None  # how the levels were formed, when not by a sweep
    server_pgids: dict[str, int] = field(default_factory=dict)  # arm -> its server's process group on this machine

    def as_dict(self) -> dict[str, Any]:
        results = {
            "complete": self.complete,
            "error": self.error,
            "started": self.started,
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "config": asdict(self.config),
            "machine": machine_facts(),
            "arms": self.arms,
            "skipped_arms": {},  # kept for readers of earlier results: every configured arm runs or the run fails
            "levels": [asdict(level) for level in self.levels],
        }
        if self.source:
            results["source"] = self.source
        return results

    def write(self) -> Path:
        """results.json (atomically) and levels.csv."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        path = self.run_dir / "results.json"
        tmp = path.with_suffix(".tmp")
        results = self.as_dict()
        tmp.write_text(json.dumps(results, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
        tmp.replace(path)
        levels_frame(results).to_csv(self.run_dir / "levels.csv", index=False)
        return path


def results_from_records(run_dir: Path, config: RunConfig, arms: dict[str, dict[str, Any]]) -> RunResults:
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
        LevelResult(arm, scenario, mode, level, 0, level_metrics(rows, config.slo).as_dict())
        for (arm, scenario, mode, level), rows in sorted(groups.items())
    ]
    return results


def load_results(run_dir: str | Path) -> dict[str, Any]:
    """A saved run's results.json (given its folder or the file)."""
    path = Path(run_dir)
    path = path / "results.json" if path.is_dir() else path
    return json.loads(path.read_text(encoding="utf-8"))


def levels_frame(results: dict[str, Any]) -> pd.DataFrame:
    """One row per (arm, scenario, mode, level, repeat): its metrics, then its server counters as ``server:<name>``."""
    rows = []
    for level in results.get("levels", []):
        row = {k: level[k] for k in ("arm", "scenario", "mode", "level", "repeat")}
        row.update(level["metrics"])
        row.update({f"server:{k}": v for k, v in (level.get("server") or {}).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def by_repeat(rows: pd.DataFrame, column: str) -> dict[int, float]:
    """``column`` of some ``levels_frame`` rows (one arm, scenario and level) by repeat number: what paired
    ratios between arms are taken over."""
    return {int(repeat): float(value) for repeat, value in zip(rows["repeat"], rows[column], strict=True)}
