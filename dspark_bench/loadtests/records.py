"""Per-request records: one JSON line each, appended and flushed the moment the request completes,
plus the raw response text as ``responses/<arm>/<request-id>.json`` (so ``jq empty`` works on them)."""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass
class RequestRecord:
    arm: str
    level: int  # concurrency (number of users)
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

    @property
    def e2e_s(self) -> float | None:
        return None if self.t_last_byte is None else self.t_last_byte - self.t_send

    @property
    def ttft_s(self) -> float | None:
        return None if self.t_first_token is None else self.t_first_token - self.t_send

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> RequestRecord:
        return cls(**{k: row.get(k) for k in cls.__dataclass_fields__})


class RecordSink:
    """Thread- and greenlet-safe appender; every record is on disk before the next request starts."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / "requests.jsonl"
        run_dir.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self.records: list[RequestRecord] = []

    def write(self, record: RequestRecord) -> None:
        line = json.dumps(asdict(record), ensure_ascii=False)
        response_dir = self.run_dir / "responses" / record.arm
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            self.records.append(record)
            response_dir.mkdir(parents=True, exist_ok=True)
            (response_dir / f"{record.request_id}.json").write_text(record.output, encoding="utf-8")

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_records(path: Path) -> list[RequestRecord]:
    """Records from a JSONL file; a torn last line (a run killed mid-write) is skipped."""
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(RequestRecord.from_dict(json.loads(line)))
        except (ValueError, TypeError):
            continue
    return records
