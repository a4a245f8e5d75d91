"""Per-request records: the one record type, where records go while a run is under way (a sink), and the
one reader of a run's ``requests.jsonl`` (or ``requests.jsonl.gz``, as committed in benchmarks/).

A run folder's sink writes each record as one JSON line the moment the request completes, plus the raw
answer as ``responses/<arm>/<request-id>.json`` (so ``jq empty`` works on them). In Locust's distributed
mode a worker's sink forwards each record to the master, which alone writes the run folder.
"""

from __future__ import annotations

import gzip
import json
import threading
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any, Protocol


@dataclass
class RequestRecord:
    arm: str
    level: float  # the load: users of a closed loop, or requests per second of an open one
    scenario: str
    mode: str
    request_id: str
    seed: int
    repeat: int
    warmup: bool
    t_send: float  # seconds, time.time() clock
    t_first_token: float | None
    t_last_byte: float | None
    prompt_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None
    status: int | None
    error: str | None
    output: str
    verdict: str
    detail: str = ""
    field_accuracy: float | None = None
    exact_match: bool | None = None
    # Client-side steps, stamped apart so the client's own delays never pass for server latency:
    t_connected: float | None = None  # the connection was ready (reused at once, or newly connected)
    new_connection: bool | None = None  # this request had to connect (its connection was not reused)
    t_headers: float | None = None  # the response's status line and headers arrived (first byte)
    # gaps between successive content chunks, ms (vLLM bench serve's ITL: a speculative chunk of several
    # tokens is one gap, as it arrives)
    itl_ms: list[float] | None = None
    t_scheduled: float | None = None  # open loop: when the request was due (t_send - t_scheduled: the client's lag)
    tags: list[str] | None = None  # the dataset line's labels (scenarios.dataset), for the report's groups
    # prompt tokens the server found in its prefix cache (usage.prompt_tokens_details, which vLLM gives
    # with --enable-prompt-tokens-details); None: the server did not say
    cached_tokens: int | None = None
    # An agent session's turn (scenarios.session): the session's id, this turn's number from 0, and how
    # many turns the session has; None for a single request.
    session: str | None = None
    turn: int | None = None
    turns: int | None = None
    # A closed loop's tail request (``plan.LevelPlan``): sent after the level's measured ones only to keep
    # its load on while they end; ``warmup`` too, so it is never measured.
    tail: bool = False

    @property
    def e2e_s(self) -> float | None:
        return None if self.t_last_byte is None else self.t_last_byte - self.t_send

    @property
    def ttft_s(self) -> float | None:
        return None if self.t_first_token is None else self.t_first_token - self.t_send

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first; None without two tokens and both timings."""
        e2e, ttft, tokens = self.e2e_s, self.ttft_s, self.output_tokens or 0
        return (e2e - ttft) / (tokens - 1) if e2e is not None and ttft is not None and tokens > 1 else None

    @property
    def ends_ticket(self) -> bool:
        """This record completes one of its level's tickets: a single request, or a session's last turn, or the
        turn whose answer ended the session (not valid). A tail request holds load and completes none."""
        return not self.tail and (self.turn is None or self.turn + 1 >= (self.turns or 0) or self.verdict != "valid")

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> RequestRecord:
        # a field a row lacks takes its default, or None (``tail``: older runs have none)
        values: dict[str, Any] = {f.name: row.get(f.name, None if f.default is MISSING else f.default) for f in fields(cls)}
        return cls(**values)


class RecordSink(Protocol):
    """Where completed requests go."""

    def write(self, record: RequestRecord) -> None: ...

    def close(self) -> None: ...


class RunFolderSink:
    """Appends to a run folder; thread- and greenlet-safe; every record is on disk before the next starts."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / "requests.jsonl"
        run_dir.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, record: RequestRecord) -> None:
        line = json.dumps(asdict(record), ensure_ascii=False)
        response_dir = self.run_dir / "responses" / record.arm
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            response_dir.mkdir(parents=True, exist_ok=True)
            (response_dir / f"{record.request_id}.json").write_text(record.output, encoding="utf-8")

    def close(self) -> None:
        with self._lock:
            self._file.close()


class DiscardingSink:
    """For requests nobody measures (an arm's priming pass): the plan counts them, no file keeps them."""

    def write(self, record: RequestRecord) -> None:
        pass

    def close(self) -> None:
        pass


RECORD_MESSAGE = "dspark_record"  # Locust custom message: a worker's record for the master's sink


class ForwardingSink:
    """A Locust worker's sink: each record goes to the master (``RECORD_MESSAGE``), so records from every
    worker, on this machine or another, land in one requests.jsonl, none lost or doubled."""

    def __init__(self, runner: Any) -> None:  # locust.runners.WorkerRunner
        self.runner = runner

    def write(self, record: RequestRecord) -> None:
        self.runner.send_message(RECORD_MESSAGE, asdict(record))

    def close(self) -> None:
        pass


def records_path(run_dir: Path) -> Path | None:
    """The run folder's records file: requests.jsonl, or its gzip as committed; None if there is neither."""
    for path in (run_dir / "requests.jsonl", run_dir / "requests.jsonl.gz"):
        if path.exists():
            return path
    return None


def read_records(path: Path) -> list[RequestRecord]:
    """Records from a JSONL file (``.gz`` too) or a run folder; a torn last line (a run killed mid-write) is
    skipped; a folder without records gives []."""
    if path.is_dir():
        found = records_path(path)
        if found is None:
            return []
        path = found
    data = path.read_bytes()
    text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")
    records = []
    for line in text.splitlines():
        try:
            records.append(RequestRecord.from_dict(json.loads(line)))
        except (ValueError, TypeError):
            continue
    return records
