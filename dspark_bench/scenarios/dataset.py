"""Dataset scenarios: a user's own requests from a file, run like any scenario.

    dspark-bench bench --scenario my-requests.jsonl

Files: JSON Lines (``.jsonl``), JSON (``.json``: a list of lines, or one JSONSchemaBench entry), CSV
(``.csv``), a folder of JSONSchemaBench entries, or a scenario YAML with ``dataset: PATH``; UTF-8, with or
without a byte-order mark. Each line:

- ``messages`` (OpenAI chat messages) or ``prompt`` (one user message): required, one of them;
- ``schema``: a JSON Schema the answer must meet (json_schema mode sends it; every mode checks it);
- ``response_format``: sent as is by the arms that constrain output (overrides the run's mode);
- ``answer``: the expected answer (a JSON value, or text), scored as field accuracy / exact match;
- ``max_tokens``: this request's limit; ``tags``: a list of labels the report groups results by.

A JSONSchemaBench entry (``{"schema": ..., "tests": [...]}``, as in shared/datasets/jsonschemabench)
becomes one request: a prompt made from the schema, json_schema mode, the verdict by schema.

Validation uses what each line gives: parse, then schema, then ground truth. A line is JSON when it
gives a schema, a JSON response_format or a JSON answer; otherwise its answer is free text. A bad line
stops loading with its number, the field and the fix, schemas included: one that would break validation
later (a ``$ref`` that does not resolve, or loops, or a schema nested too deep) is refused before the run.
Requests cycle through the lines in file order.
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
from pathlib import Path
from typing import Any

from dspark_bench.scenarios.spec import Example, Mode, Sample, Scenario, ScenarioError, Split, check_schema

SUFFIXES = (".jsonl", ".json", ".csv")
ENCODING = "utf-8-sig"  # UTF-8, with or without the byte-order mark Excel and many Windows tools write
KNOWN_FIELDS = ("messages", "prompt", "schema", "response_format", "answer", "max_tokens", "tags", "description", "meta")
ROLES = {"system", "user", "assistant", "developer", "tool"}
# Dataset lines repeat, so both splits name all of them; nothing is trained on a dataset.
EVAL_SEEDS = (0, 1_000_000_000)
TRAIN_SEEDS = (1_000_000_000, 2_000_000_000)
SCHEMA_PROMPT = (
    "Produce one JSON document that conforms to this JSON Schema. Reply with the JSON only.\n\nSchema:\n{schema}"
)


def is_dataset_path(name_or_path: str | Path) -> bool:
    path = Path(name_or_path)
    return path.suffix.lower() in SUFFIXES or path.is_dir()


def line_error(path: Path, line: int, field: str, problem: str, fix: str) -> ScenarioError:
    return ScenarioError(path, f"line {line}: {field}", problem, fix)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object hook: a key written twice is refused (json keeps the last, silently; OpenAI's servers differ)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"key {key!r} written twice in one object")
        found[key] = value
    return found


def loads(text: str) -> Any:
    """JSON text of a data file, with every object's keys unique."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def read_text(path: Path) -> str:
    """The file as text; ScenarioError naming the line and byte where it is not UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode(ENCODING)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise line_error(
            path, line, "(line)", f"not UTF-8 (byte 0x{data[exc.start]:02x} at column {column})", "save the file as UTF-8"
        ) from None


def rows_of(path: Path) -> list[tuple[int, Any]]:
    """(line number, raw row) for every request in the file or folder."""
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise ScenarioError(path, "(folder)", "holds no *.json files", "give a JSONSchemaBench folder or a data file")
        return [(1, _read_json(f)) for f in files]
    if not path.is_file():
        raise ScenarioError(path, "path", "file not found", "check the path")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows = []
        for number, text in enumerate(read_text(path).splitlines(), start=1):
            if not text.strip():
                continue
            try:
                rows.append((number, loads(text)))
            except ValueError as exc:
                raise line_error(path, number, "(line)", f"not JSON ({exc})", "write one JSON object per line") from None
        return rows
    if suffix == ".json":
        data = _read_json(path)
        if isinstance(data, list):
            return [(index, row) for index, row in enumerate(data, start=1)]
        return [(1, data)]
    with io.StringIO(read_text(path), newline="") as f:  # CSV: a header row, then one request per row
        reader = csv.DictReader(f)
        return [(number, _csv_row(path, number, row)) for number, row in enumerate(reader, start=2)]


def _read_json(path: Path) -> Any:
    try:
        return loads(read_text(path))
    except ValueError as exc:
        raise ScenarioError(path, "(file)", f"not JSON ({exc})", "write a JSON list of requests, or use .jsonl") from None


def _csv_row(path: Path, number: int, row: dict[str, str]) -> dict[str, Any]:
    """CSV cells are text: messages, schema, response_format and JSON answers are written as JSON in them."""
    out: dict[str, Any] = {}
    for key, cell in row.items():
        if key is None or cell is None or cell == "":
            continue
        if key in ("messages", "schema", "response_format"):
            try:
                out[key] = loads(cell)
            except ValueError:
                raise line_error(path, number, key, "is not JSON", f"write the {key} cell as JSON") from None
        elif key == "answer":
            try:
                out[key] = loads(cell) if cell.lstrip()[:1] in ("{", "[") else cell
            except ValueError:
                out[key] = cell
        elif key == "max_tokens":
            out[key] = int(cell) if cell.strip().isdigit() else cell
        elif key == "tags":
            out[key] = [t.strip() for t in re.split(r"[;|]", cell) if t.strip()]
        else:
            out[key] = cell
    return out


def _request(path: Path, number: int, raw: Any) -> dict[str, Any]:
    """One line, checked and normalised: messages, schema, response_format, answer, max_tokens, tags, is_json."""
    if not isinstance(raw, dict):
        raise line_error(path, number, "(line)", "not an object", 'write {"prompt": "..."} or {"messages": [...]}')
    if "tests" in raw and "schema" in raw and "messages" not in raw and "prompt" not in raw:
        raw = {"prompt": SCHEMA_PROMPT.format(schema=json.dumps(raw["schema"], ensure_ascii=False)), "schema": raw["schema"],
               "tags": [str(raw.get("meta", {}).get("source", "jsonschemabench"))] if isinstance(raw.get("meta"), dict) else []}  # fmt: skip
    unknown = sorted(set(raw) - set(KNOWN_FIELDS) - {"tests"})
    if unknown:
        raise line_error(path, number, unknown[0], "unknown field", f"use {', '.join(KNOWN_FIELDS[:7])}")
    if ("messages" in raw) == ("prompt" in raw):
        raise line_error(path, number, "messages", "give exactly one of messages and prompt", 'add "prompt": "..." or "messages": [...]')
    if "prompt" in raw:
        if not isinstance(raw["prompt"], str) or not raw["prompt"].strip():
            raise line_error(path, number, "prompt", "not a non-empty string", 'write "prompt": "your request"')
        messages = [{"role": "user", "content": raw["prompt"]}]
    else:
        messages = raw["messages"]
        fix = 'write "messages": [{"role": "user", "content": "..."}]'
        if not isinstance(messages, list) or not messages:
            raise line_error(path, number, "messages", "not a non-empty list", fix)
        for message in messages:
            if not isinstance(message, dict) or message.get("role") not in ROLES or not isinstance(message.get("content"), str):
                raise line_error(path, number, "messages", f"{json.dumps(message)[:80]} is not a chat message", fix)
    schema = raw.get("schema")
    if schema is not None:
        try:
            check_schema(schema, path, f"line {number}: schema")
        except ScenarioError:
            raise
    response_format = raw.get("response_format")
    if response_format is not None:
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if kind not in ("text", "json_object", "json_schema"):
            raise line_error(path, number, "response_format", f"{json.dumps(response_format)[:80]} is not an OpenAI response_format",
                              'write {"type": "json_object"}, {"type": "json_schema", "json_schema": {...}} or {"type": "text"}')  # fmt: skip
        if kind == "json_schema":
            inner = response_format.get("json_schema")
            if not isinstance(inner, dict) or not isinstance(inner.get("schema"), dict):
                raise line_error(path, number, "response_format", "json_schema without a schema",
                                  'write {"type": "json_schema", "json_schema": {"name": "x", "schema": {...}}}')  # fmt: skip
            check_schema(inner["schema"], path, f"line {number}: response_format.json_schema.schema")
            schema = schema if schema is not None else inner["schema"]
    max_tokens, tags = limit_and_tags(path, number, raw)
    answer = raw.get("answer")
    is_json = (
        schema is not None
        or (isinstance(response_format, dict) and response_format.get("type") in ("json_object", "json_schema"))
        or isinstance(answer, dict | list)
    )
    if is_json and schema is not None and answer is not None:
        from jsonschema import Draft202012Validator, FormatChecker

        if error := next(iter(Draft202012Validator(schema, format_checker=FormatChecker()).iter_errors(answer)), None):
            raise line_error(path, number, "answer", f"breaks the line's own schema: {error.message}", "correct the answer or the schema")
    return {
        "messages": messages,
        "schema": schema,
        "response_format": response_format,
        "answer": answer,
        "max_tokens": max_tokens,
        "tags": tags,
        "is_json": is_json,
    }


def limit_and_tags(path: Path, number: int, raw: dict[str, Any]) -> tuple[int | None, tuple[str, ...]]:
    """A line's own ``max_tokens`` and ``tags`` (a request's, or an agent session's), checked."""
    max_tokens = raw.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise line_error(path, number, "max_tokens", f"{max_tokens!r} is not a positive integer", 'write "max_tokens": 256')
    tags = raw.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str | int) and not isinstance(t, bool) for t in tags):
        example = json.dumps([tags] if isinstance(tags, str) else ["invoices", "long"])
        raise line_error(path, number, "tags", f"{json.dumps(tags)[:60]} is not a list of labels", f'write "tags": {example}')
    return max_tokens, tuple(str(t) for t in tags)


def scenario_name(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", path.stem if path.is_file() else path.name).strip("_") or "dataset"


def load_dataset(path: Path, name: str | None = None, description: str | None = None) -> Scenario:
    """The scenario of a dataset file or folder; raises ScenarioError naming the line, the field and the fix."""
    rows = [_request(path, number, raw) for number, raw in rows_of(path)]
    if not rows:
        raise ScenarioError(path, "(file)", "holds no requests", "add one request per line")
    return DatasetScenario(**scenario_fields(path, rows, name or scenario_name(path), description or f"requests from {path}"))


def scenario_fields(path: Path, rows: list[dict[str, Any]], name: str, description: str) -> dict[str, Any]:
    """A file's checked rows as the fields of a ``DatasetScenario`` (or a subclass: traces), its modes from
    what the rows give; raises ScenarioError when free-text and JSON requests are mixed."""
    if len({row["is_json"] for row in rows}) > 1:
        first_text = next(i for i, row in enumerate(rows) if not row["is_json"])
        raise ScenarioError(path, f"request {first_text + 1}", "free-text and JSON requests mixed in one file",
                            "split them into two files (two scenarios), or give every JSON line a schema or response_format")  # fmt: skip
    is_json = rows[0]["is_json"]
    has_schemas = all(row["schema"] is not None for row in rows)
    modes = (Mode.PROMPT, Mode.JSON_OBJECT, *((Mode.JSON_SCHEMA,) if has_schemas else ())) if is_json else (Mode.TEXT,)

    def generate(_rng: random.Random, scenario: Scenario) -> Example:
        raise AssertionError("dataset scenarios build samples from their rows")  # see DatasetScenario.sample

    return {
        "name": name,
        "description": description,
        "output": "json" if is_json else "text",
        "modes": modes,
        "splits": {Split.TRAIN: TRAIN_SEEDS, Split.EVAL: EVAL_SEEDS},
        "generator": generate,
        "source": path,
        "rows": tuple(rows),
    }


def sample_row(sample: Sample) -> dict[str, Any]:
    """A single request as a dataset row (what ``_request`` makes of a line): a trace row may name one."""
    return {"messages": sample.messages, "schema": sample.schema, "response_format": sample.explicit_format, "answer": sample.answer,
            "max_tokens": sample.max_tokens, "tags": sample.tags, "is_json": sample.is_json}  # fmt: skip


class DatasetScenario(Scenario):
    """A scenario whose requests are a file's lines, cycled in order (seed n is line n mod lines)."""

    rows: tuple[dict[str, Any], ...]

    def __init__(self, *, rows: tuple[dict[str, Any], ...], **fields: Any) -> None:
        super().__init__(**fields)
        object.__setattr__(self, "rows", rows)

    @property
    def distinct_prompts(self) -> int:
        return len(self.rows)

    def sample(self, seed: int):
        start = self.splits[Split.TRAIN][0] if seed >= self.splits[Split.TRAIN][0] else self.splits[Split.EVAL][0]
        row = self.rows[(seed - start) % len(self.rows)]
        return Sample(
            scenario=self.name,
            seed=seed,
            messages=row["messages"],
            schema=row["schema"],
            answer=row["answer"],
            is_json=row["is_json"],
            explicit_format=row["response_format"],
            max_tokens=row["max_tokens"],
            tags=row["tags"],
        )
