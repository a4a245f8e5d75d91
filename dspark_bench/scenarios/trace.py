"""Traces: requests with their arrival times, replayed as recorded (``dspark-bench bench --trace FILE``).

Three formats, told apart by their columns and read as published:

- **Mooncake** (JSON Lines, kvcache-ai/Mooncake's FAST'25 traces): ``timestamp`` (milliseconds from the
  trace's start), ``input_length``, ``output_length``, ``hash_ids`` (one id per 512-token block of the
  prompt; requests that share a leading id share that prefix).
- **Azure LLM inference** (CSV, Azure/AzurePublicDataset 2023/2024): ``TIMESTAMP`` (a date and time),
  ``ContextTokens``, ``GeneratedTokens``.
- **Requests of your own** (JSON Lines or CSV): ``timestamp`` in milliseconds beside the fields of a
  dataset line (``prompt`` or ``messages``, ``schema``, ``response_format``, ``max_tokens``, ``answer``,
  ``tags``: see ``scenarios.dataset``), or beside ``scenario`` and ``index``: the index-th request of a
  scenario (a built-in name, or a dataset file, its path relative to the trace's folder).

A row that gives only token lengths becomes a synthetic JSON request: a prompt of that many tokens of
the run's model (its tokenizer, chat template included; one word per token for a server whose tokenizer
is not at hand), made of one fixed block of words per hash id so that shared ids share a prefix, then an instruction to answer in JSON under ``SYNTHETIC_SCHEMA``, with
``max_tokens`` the row's output length. A JSON answer may end before that length: records keep the
tokens really written. Lengths are taken as they are; a prompt longer than the model's context is
refused by the server, which the run's first request reports.

The trace is a dataset scenario whose rows keep file order, plus each row's offset in seconds from the
first arrival (``TraceScenario.offsets_s``). Every problem names the file, the line, the field and the fix.
"""

from __future__ import annotations

import csv
import functools
import json
import random
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from dspark_bench.scenarios.dataset import (
    ENCODING,
    DatasetScenario,
    _request,
    is_dataset_path,
    sample_row,
    scenario_fields,
    scenario_name,
)
from dspark_bench.scenarios.spec import Scenario, ScenarioError, Split

ScenarioLoader = Callable[[str | Path], Scenario]

MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")
AZURE_FIELDS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BLOCK_TOKENS = 512  # Mooncake's hash block: the tokens each hash id stands for
SYNTHETIC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"topic": {"type": "string"}, "keywords": {"type": "array", "items": {"type": "string"}}},
    "required": ["topic", "keywords"],
}
SYNTHETIC_INSTRUCTION = 'Reply with one JSON object about the text above: {"topic": "...", "keywords": ["...", ...]}.'
WORDS = (
    "the of and to in is for on that by this with you it not or be are from at as your all have new more an was we "
    "will home can us about if page my has search free but our one other do no information time they site he up may "
    "what which their news out use any there see only so his when contact here business who web also now help get view "
    "online first been would how were me services some these click its like service than find price date back top "
    "people had list name just over state year day into email two health world next used go work last most products "
    "music buy data make them should product system post her city add policy number such please available support "
    "message after best software then good video well where info rights public books high school through each links "
    "she review years order very privacy book items company read group need many user said does set under general"
).split()


def is_trace(path: Path) -> bool:
    """Whether a data file's first row carries arrival times (a trace, not a plain dataset)."""
    try:
        with path.open(encoding=ENCODING, newline="") as f:
            if path.suffix.lower() == ".csv":
                header = next(csv.reader(f), [])
                return "TIMESTAMP" in header or "timestamp" in header
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    return isinstance(row, dict) and "timestamp" in row
    except (OSError, ValueError, UnicodeDecodeError):
        return False  # the dataset loader reports what is wrong with the file
    return False


def _fail(path: Path, line: int, field: str, problem: str, fix: str) -> ScenarioError:
    return ScenarioError(path, f"line {line}: {field}", problem, fix)


def _rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        raise ScenarioError(path, "path", "file not found", "check the path")
    if path.suffix.lower() == ".csv":
        with path.open(encoding=ENCODING, newline="") as f:
            return [(number, {k: v for k, v in row.items() if k is not None}) for number, row in enumerate(csv.DictReader(f), start=2)]
    rows = []
    for number, text in enumerate(path.read_text(encoding=ENCODING).splitlines(), start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except ValueError as exc:
            raise _fail(path, number, "(line)", f"not JSON ({exc})", "write one JSON object per line") from None
        if not isinstance(row, dict):
            raise _fail(path, number, "(line)", "not an object", 'write {"timestamp": 0, "input_length": 100, "output_length": 50}')
        rows.append((number, row))
    return rows


def _count(path: Path, line: int, row: dict[str, Any], field: str, least: int) -> int:
    value = row.get(field)
    number = int(value) if isinstance(value, str) and value.strip().lstrip("-").isdigit() else value  # CSV cells are text
    if not isinstance(number, int) or isinstance(number, bool) or number < least:
        raise _fail(path, line, field, f"{value!r} is not a whole number of at least {least}", f'write "{field}": 128')
    return number


def _arrival_s(path: Path, line: int, row: dict[str, Any]) -> float:
    """The row's arrival, in seconds on the trace's own clock."""
    if "TIMESTAMP" in row:
        text = str(row["TIMESTAMP"]).strip()
        try:  # Azure writes 7 decimals of a second; Python reads 6
            whole, _, fraction = text.partition(".")
            return datetime.fromisoformat(whole).timestamp() + (float(f"0.{fraction}") if fraction else 0.0)
        except ValueError:
            raise _fail(path, line, "TIMESTAMP", f"{text!r} is not a date and time", 'write e.g. "2023-11-16 18:15:46.6805900"') from None
    value = row.get("timestamp")
    try:
        milliseconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        milliseconds = float("nan")
    if milliseconds != milliseconds or isinstance(value, bool) or milliseconds < 0:
        raise _fail(path, line, "timestamp", f"{value!r} is not a time in milliseconds", 'write "timestamp": 1500 (ms from the trace\'s start)')
    return milliseconds / 1000.0


@functools.lru_cache(maxsize=4)
def _tokenizer(model_dir: str) -> Any:
    from transformers import AutoTokenizer  # vLLM's own dependency; only a trace with token lengths needs it

    return AutoTokenizer.from_pretrained(model_dir)


def _template_tokens(tokenizer: Any) -> int:
    """Tokens the chat template adds around one user message (the server counts them as prompt)."""
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": ""}], tokenize=False, add_generation_prompt=True)
        return len(tokenizer.encode(text, add_special_tokens=False))
    except Exception:  # noqa: BLE001 - a tokenizer without a chat template adds nothing
        return 0


def synthetic_prompt(input_tokens: int, hash_ids: list[int], row_seed: int, tokenizer: Any = None) -> str:
    """About ``input_tokens`` prompt tokens: one fixed block of words per hash id (a shared id, a shared
    prefix), or words of the row's own without ids; the JSON instruction last. With the served model's
    ``tokenizer`` the count is its own (chat template included), cut at a token; without, a word counts
    as a token. A prompt is never shorter than the instruction and the template (about 55 tokens here)."""
    count = (lambda text: len(tokenizer.encode(text, add_special_tokens=False))) if tokenizer is not None else (lambda text: len(text.split()))
    overhead = _template_tokens(tokenizer) if tokenizer is not None else 0
    budget = max(1, input_tokens - count("\n\n" + SYNTHETIC_INSTRUCTION) - overhead)
    words: list[str] = []
    for block in hash_ids or []:
        words += random.Random(f"block-{block}").choices(WORDS, k=BLOCK_TOKENS)
        if len(words) >= budget:
            break
    if len(words) < budget:
        words += random.Random(f"row-{row_seed}").choices(WORDS, k=budget - len(words))
    text = " ".join(words[:budget])
    if tokenizer is not None:  # a word is a token or more: cut at the budget's token
        text = tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)[:budget])
    return text + "\n\n" + SYNTHETIC_INSTRUCTION


def _synthetic_row(path: Path, line: int, row: dict[str, Any], index: int, tokenizer: Any) -> dict[str, Any]:
    if "TIMESTAMP" in row:
        input_tokens, output_tokens = (_count(path, line, row, field, 1) for field in AZURE_FIELDS[1:])
        hash_ids: list[int] = []
    else:
        input_tokens, output_tokens = (_count(path, line, row, field, 1) for field in MOONCAKE_FIELDS[1:])
        hash_ids = row.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
            raise _fail(path, line, "hash_ids", f"{json.dumps(hash_ids)[:60]} is not a list of integers", 'write "hash_ids": [0, 1, 2]')
    return {
        "messages": [{"role": "user", "content": synthetic_prompt(input_tokens, hash_ids, index, tokenizer)}],
        "schema": SYNTHETIC_SCHEMA,
        "response_format": None,
        "answer": None,
        "max_tokens": output_tokens,
        "tags": (),
        "is_json": True,
    }


def _indexed_row(path: Path, line: int, row: dict[str, Any], loaded: dict[str, Scenario], loader: ScenarioLoader) -> dict[str, Any]:
    """The request a row names by ``scenario`` and ``index`` (into the scenario's eval split), as a dataset row."""
    name, index = row.get("scenario"), _count(path, line, row, "index", 0)
    fix = 'write "scenario": "order_extraction" (a built-in name, or a dataset file beside the trace)'
    if not isinstance(name, str) or not name.strip():
        raise _fail(path, line, "scenario", f"{name!r} is not a scenario", fix)
    if name not in loaded:
        try:
            loaded[name] = loader(path.parent / name if is_dataset_path(name) else name)
        except ScenarioError as exc:
            raise _fail(path, line, "scenario", f"cannot be loaded ({exc})", fix) from None
    scenario = loaded[name]
    start, stop = scenario.splits[Split.EVAL]
    if index >= min(stop - start, scenario.distinct_prompts):
        raise _fail(path, line, "index", f"{index} is past the {scenario.distinct_prompts} requests of {name}", "give a smaller index")
    sample = scenario.sample(start + index)
    if sample.turns:
        raise _fail(path, line, "scenario", f"{name} holds agent sessions, which a trace does not replay", "name a scenario of single requests")
    return sample_row(sample)


def load_trace(path: Path, loader: ScenarioLoader, name: str | None = None, model_dir: str | Path | None = None) -> TraceScenario:
    """A trace file as a scenario with arrival times; raises ScenarioError naming the line, field and fix.
    Token lengths count in the tokenizer of ``model_dir`` when it has one (else a word is a token);
    ``loader`` (``load_scenario``) loads the scenarios that rows index into."""
    raw = _rows(path)
    tokenizer = None
    if model_dir is not None and (Path(model_dir) / "tokenizer_config.json").exists():
        tokenizer = _tokenizer(str(model_dir))
    if not raw:
        raise ScenarioError(path, "(file)", "holds no requests", "add one request per line")
    rows, arrivals = [], []
    loaded: dict[str, Scenario] = {}  # scenarios that rows index into
    for index, (line, row) in enumerate(raw):
        arrivals.append(_arrival_s(path, line, row))
        timeless = {k: v for k, v in row.items() if k not in ("timestamp", "TIMESTAMP")}
        if any(field in row for field in (*MOONCAKE_FIELDS[1:], *AZURE_FIELDS[1:])):
            rows.append(_synthetic_row(path, line, row, index, tokenizer))
        elif "index" in row or "scenario" in row:
            rows.append(_indexed_row(path, line, row, loaded, loader))
        else:
            rows.append(_request(path, line, timeless))
        if index and arrivals[-1] < arrivals[-2]:
            raise _fail(path, line, "timestamp", "earlier than the line before", "sort the trace by arrival time")
    fields = scenario_fields(path, rows, name or scenario_name(path), f"the trace {path}")
    return TraceScenario(**fields, offsets_s=tuple(at - arrivals[0] for at in arrivals))


class TraceScenario(DatasetScenario):
    """A dataset whose rows keep their arrival offsets: replayed in file order at the trace's own times."""

    offsets_s: tuple[float, ...]

    def __init__(self, *, offsets_s: tuple[float, ...], **fields: Any) -> None:
        super().__init__(**fields)
        object.__setattr__(self, "offsets_s", offsets_s)

    @property
    def span_s(self) -> float:
        return self.offsets_s[-1] if self.offsets_s else 0.0

    @property
    def rate(self) -> float:
        """Mean arrivals per second over the trace (its requests after the first, over its span)."""
        return (len(self.offsets_s) - 1) / self.span_s if self.span_s > 0 else float(len(self.offsets_s))
