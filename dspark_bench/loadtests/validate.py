"""The verdict on one response, and its ground-truth field accuracy. Pure functions.

Verdicts, checked in this order:
- ``http_error``: the server answered with a non-2xx status or the stream broke.
- ``timeout``: no complete answer within the request timeout.
- ``truncated``: ``finish_reason == "length"`` (max_tokens reached); reported apart from invalid JSON.
- ``parse_error``: a JSON scenario whose output does not parse as one JSON value.
- ``schema_violation``: parses, but breaks the request's JSON Schema (pointer and keyword recorded).
- ``valid``: everything else (for text scenarios: a non-empty answer that arrived in full).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.validators import validator_for


class Verdict(StrEnum):
    VALID = "valid"
    PARSE_ERROR = "parse_error"
    SCHEMA_VIOLATION = "schema_violation"
    TRUNCATED = "truncated"
    HTTP_ERROR = "http_error"
    TIMEOUT = "timeout"


INVALID_JSON = (Verdict.PARSE_ERROR, Verdict.SCHEMA_VIOLATION)  # the answer arrived whole but is not the JSON asked for


@dataclass(frozen=True)
class Validation:
    verdict: Verdict
    detail: str = ""  # parse error message, or "pointer: keyword: message" for schema violations
    field_accuracy: float | None = None  # share of ground-truth leaves reproduced exactly
    exact_match: bool | None = None


@lru_cache(maxsize=256)
def _validator(schema_json: str):
    """A compiled validator per schema (cached: a run reuses a handful of schemas thousands of times).
    The schema's own ``$schema`` picks the draft; 2020-12 otherwise."""
    schema = json.loads(schema_json)
    return validator_for(schema, default=Draft202012Validator)(schema, format_checker=FormatChecker())


def leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """Flatten a JSON value into {json-pointer: scalar}; lists index by position."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(leaves(item, f"{prefix}/{key}"))
        return out or {prefix: {}}
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            out.update(leaves(item, f"{prefix}/{i}"))
        return out or {prefix: []}
    return {prefix: value}


def _same(a: Any, b: Any) -> bool:
    # JSON has one number type: 12 and 12.0 are the same value; True is not 1.
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def field_accuracy(output: Any, truth: Any) -> float:
    """Share of the ground truth's leaves present in ``output`` with an equal value."""
    want, got = leaves(truth), leaves(output)
    if not want:
        return 1.0
    return sum(1 for k, v in want.items() if k in got and _same(got[k], v)) / len(want)


def word_overlap(output: str, reference: str) -> float:
    """Recall of the reference's words (characters for CJK text) in the output: a simple on-topic score."""

    def units(text: str) -> set[str]:
        words = set(text.lower().replace(".", " ").replace(",", " ").split())
        return words | {ch for ch in text if "\u4e00" <= ch <= "\u9fff"}

    ref = units(reference)
    return len(ref & units(output)) / len(ref) if ref else 0.0


def validate(
    text: str,
    *,
    is_json: bool,
    schema: dict[str, Any] | None,
    truth: Any,
    status: int | None = 200,
    finish_reason: str | None = "stop",
    error: str | None = None,
    timed_out: bool = False,
) -> Validation:
    if timed_out:
        return Validation(Verdict.TIMEOUT, error or "request timed out")
    if error or status is None or not 200 <= status < 300:
        return Validation(Verdict.HTTP_ERROR, error or f"HTTP {status}")
    if finish_reason == "length":
        return Validation(Verdict.TRUNCATED, "max_tokens reached")
    if not is_json:
        score = word_overlap(text, str(truth)) if truth is not None else None
        return Validation(Verdict.VALID, field_accuracy=score, exact_match=text.strip() == str(truth).strip())
    try:
        value = json.loads(text)
    except ValueError as exc:
        return Validation(Verdict.PARSE_ERROR, str(exc))
    if schema is not None:
        error_found = next(iter(_validator(json.dumps(schema, sort_keys=True)).iter_errors(value)), None)
        if error_found is not None:
            pointer = "/" + "/".join(str(p) for p in error_found.absolute_path)
            return Validation(Verdict.SCHEMA_VIOLATION, f"{pointer}: {error_found.validator}: {error_found.message}")
    if truth is None:
        return Validation(Verdict.VALID)
    return Validation(Verdict.VALID, field_accuracy=field_accuracy(value, truth), exact_match=_deep_same(value, truth))


def _deep_same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_deep_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_deep_same(x, y) for x, y in zip(a, b, strict=True))
    return _same(a, b)
