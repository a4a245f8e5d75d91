"""Scenario files: loading, checking, and turning a seed into a request.

A scenario is a YAML file (see ``scenarios/defs/``) naming a seeded generator, the output kind, the
modes it runs in, disjoint train / eval seed ranges, and the JSON Schema of its answers. Every
problem with a file is raised as :class:`ScenarioError` at load time, naming the file, the field and
the fix, so a broken scenario never reaches a benchmark run.
"""

from __future__ import annotations

import importlib
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import unquote

DEFS_DIR = Path(__file__).parent / "defs"


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message says which file, which field, and the fix."""

    def __init__(self, source: str | Path, field_name: str, problem: str, fix: str) -> None:
        self.source, self.field_name = str(source), field_name
        super().__init__(f"{source}: field '{field_name}': {problem}; fix: {fix}")


class Mode(StrEnum):
    """How JSON is asked for. ``prompt``: only in the prompt text (the article's baseline)."""

    PROMPT = "prompt"
    JSON_OBJECT = "json_object"
    JSON_SCHEMA = "json_schema"
    TEXT = "text"  # plain-text scenarios (no JSON at all)


class Split(StrEnum):
    TRAIN = "train"
    EVAL = "eval"


@dataclass(frozen=True)
class Turn:
    """One turn of an agent session: the user's message (the last tool's result folded in, so any chat
    template takes it), the schema its answer must meet (the called tool's parameters; None: any JSON)
    and, optionally, the expected answer."""

    message: str
    schema: dict[str, Any] | None = None
    expected: Any = None
    tool: str | None = None


@dataclass(frozen=True)
class Example:
    """What a generator returns for one seed."""

    messages: list[dict[str, str]]
    answer: Any  # the ground truth: a JSON value, or the reference text for text scenarios
    schema: dict[str, Any] | None = None  # per-request schema (overrides the file's, e.g. tool calls)
    turns: tuple[Turn, ...] = ()  # an agent session: its turns, sent one after another after ``messages``


@dataclass(frozen=True)
class Sample:
    """One request of a scenario, ready to send: messages, schema and ground truth."""

    scenario: str
    seed: int
    messages: list[dict[str, str]]
    schema: dict[str, Any] | None
    answer: Any
    is_json: bool
    # From a dataset line (scenarios.dataset): what that request asks for itself.
    explicit_format: dict[str, Any] | None = None  # sent as is by arms that constrain the output
    max_tokens: int | None = None  # this request's own limit (else the run's)
    tags: tuple[str, ...] = ()  # groups for the report
    # An agent session (scenarios.session): the turns a user sends one after another, each with the
    # conversation so far; ``messages`` is what comes before the first turn. Empty: one request.
    turns: tuple[Turn, ...] = ()

    def turn_request(self, number: int, history: list[dict[str, str]]) -> Sample:
        """The request of turn ``number`` after ``history`` (the session's messages so far, answers included)."""
        turn = self.turns[number]
        messages = [*history, {"role": "user", "content": turn.message}]
        return replace(self, messages=messages, schema=turn.schema, answer=turn.expected, turns=())

    @property
    def request_id(self) -> str:
        return f"{self.scenario}-{self.seed}"

    def answer_text(self) -> str:
        """The reference completion: compact JSON in schema key order, or the plain text."""
        if not self.is_json:
            return str(self.answer)
        return json.dumps(self.answer, ensure_ascii=False, separators=(",", ":"))

    def response_format(self, mode: Mode | str) -> dict[str, Any] | None:
        """The OpenAI ``response_format`` field for ``mode`` (None: leave the field out)."""
        mode = Mode(mode)
        if mode is Mode.PROMPT:
            return None
        if self.explicit_format is not None:
            return self.explicit_format
        if mode is Mode.TEXT or not self.is_json:
            # Explicit, as OpenAI allows: a server that defaults to JSON must leave plain text alone.
            return {"type": "text"}
        if mode is Mode.JSON_OBJECT or self.schema is None:
            return {"type": "json_object"}
        if mode is Mode.JSON_SCHEMA:
            return {
                "type": "json_schema",
                "json_schema": {"name": self.scenario, "schema": self.schema, "strict": True},
            }
        return None


GeneratorFn = Callable[[random.Random, "Scenario"], Example]


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    output: str  # "json" or "text"
    modes: tuple[Mode, ...]
    splits: dict[Split, tuple[int, int]]  # half-open seed ranges
    generator: GeneratorFn
    source: Path
    schema: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)  # free data for the generator (tool lists...)
    max_tokens: int | None = None  # each request's own limit (else the run's): agent sessions' context grows

    @property
    def is_json(self) -> bool:
        return self.output == "json"

    @property
    def distinct_prompts(self) -> int:
        """How many different requests the eval split holds (a seeded generator: one per seed)."""
        start, stop = self.splits[Split.EVAL]
        return stop - start

    def sample(self, seed: int) -> Sample:
        """The request for an absolute ``seed``: the same seed always gives the same request."""
        example = self.generator(random.Random(f"{self.name}:{seed}"), self)
        return Sample(
            scenario=self.name,
            seed=seed,
            messages=example.messages,
            schema=example.schema if example.schema is not None else self.schema,
            answer=example.answer,
            is_json=self.is_json,
            max_tokens=self.max_tokens,
            turns=example.turns,
        )

    def samples(self, split: Split | str, count: int, offset: int = 0) -> Iterator[Sample]:
        """``count`` requests from ``split``, starting ``offset`` seeds into it."""
        start, stop = self.splits[Split(split)]
        if offset + count > stop - start:
            raise ValueError(f"{self.name}: split {split} holds {stop - start} seeds, asked for {offset + count}")
        for seed in range(start + offset, start + offset + count):
            yield self.sample(seed)


def builtin_names() -> list[str]:
    return sorted(p.stem for p in DEFS_DIR.glob("*.yaml"))


def parse_scenario_yaml(path: Path, raw: dict[str, Any]) -> Scenario:
    """The scenario a generator-backed YAML file describes (see ``scenarios/defs/``)."""
    return _parse(path, raw)


_REQUIRED = ("name", "description", "generator", "output", "modes", "splits")
_KNOWN = set(_REQUIRED) | {"schema", "params", "max_tokens"}


def _parse(path: Path, raw: dict[str, Any]) -> Scenario:
    for key in _REQUIRED:
        if key not in raw:
            raise ScenarioError(path, key, "missing", f"add '{key}:' (required keys: {', '.join(_REQUIRED)})")
    unknown = set(raw) - _KNOWN
    if unknown:
        raise ScenarioError(path, sorted(unknown)[0], "unknown key", f"remove it; known keys: {', '.join(sorted(_KNOWN))}")
    output = raw["output"]
    if output not in ("json", "text"):
        raise ScenarioError(path, "output", f"unknown output {output!r}", "use 'json' or 'text'")
    modes = _parse_modes(path, raw["modes"], output)
    splits = _parse_splits(path, raw["splits"])
    schema = raw.get("schema")
    if schema is not None:
        check_schema(schema, path, "schema")
    if output == "json" and schema is None and Mode.JSON_SCHEMA in modes and not raw.get("params"):
        raise ScenarioError(path, "schema", "json_schema mode needs a schema", "add 'schema:' or drop json_schema")
    max_tokens = raw.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise ScenarioError(path, "max_tokens", f"{max_tokens!r} is not a positive integer", "write 'max_tokens: 160', or leave it out")
    scenario = Scenario(
        max_tokens=max_tokens,
        name=str(raw["name"]),
        description=str(raw["description"]),
        output=output,
        modes=modes,
        splits=splits,
        generator=_resolve_generator(path, raw["generator"]),
        source=path,
        schema=schema,
        params=raw.get("params") or {},
    )
    _smoke_test(scenario)
    return scenario


def _parse_modes(path: Path, modes: Any, output: str) -> tuple[Mode, ...]:
    allowed = [Mode.TEXT] if output == "text" else [Mode.PROMPT, Mode.JSON_OBJECT, Mode.JSON_SCHEMA]
    if not isinstance(modes, list) or not modes:
        raise ScenarioError(path, "modes", "not a non-empty list", f"list some of {', '.join(allowed)}")
    for mode in modes:
        if mode not in allowed:
            raise ScenarioError(path, "modes", f"unknown mode {mode!r} for output {output}", f"use {', '.join(allowed)}")
    return tuple(Mode(m) for m in modes)


def _parse_splits(path: Path, splits: Any) -> dict[Split, tuple[int, int]]:
    fix = "write 'splits: {train: [0, 1000000], eval: [1000000, 1100000]}' (half-open, disjoint)"
    if not isinstance(splits, dict) or set(splits) != {"train", "eval"}:
        raise ScenarioError(path, "splits", "needs exactly 'train' and 'eval'", fix)
    parsed: dict[Split, tuple[int, int]] = {}
    for key, bounds in splits.items():
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(isinstance(b, int) for b in bounds)):
            raise ScenarioError(path, f"splits.{key}", "not a [start, stop] pair of integers", fix)
        if bounds[0] >= bounds[1]:
            raise ScenarioError(path, f"splits.{key}", "empty range", fix)
        parsed[Split(key)] = (bounds[0], bounds[1])
    (a0, a1), (b0, b1) = parsed[Split.TRAIN], parsed[Split.EVAL]
    if a0 < b1 and b0 < a1:
        raise ScenarioError(path, "splits", "train and eval seed ranges overlap", fix)
    return parsed


def _resolve_generator(path: Path, ref: Any) -> GeneratorFn:
    fix = "write 'generator: package.module:function'"
    if not isinstance(ref, str) or ":" not in ref:
        raise ScenarioError(path, "generator", f"{ref!r} is not 'module:function'", fix)
    module_name, func_name = ref.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ScenarioError(path, "generator", f"cannot import {module_name} ({exc})", fix) from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ScenarioError(path, "generator", f"{module_name} has no function {func_name}", fix)
    return func


MAX_SCHEMA_DEPTH = 64  # nesting of a schema's own objects and lists; deeper ones are refused before the run


def check_schema(schema: Any, source: str | Path, field_name: str) -> None:
    """Raise ScenarioError unless ``schema`` is a valid JSON Schema (draft 2020-12) that validation can use
    offline: every ``$ref`` resolves inside it, no ``$ref`` loops back to itself without a value in between
    (validation would recurse for ever), and it nests less than MAX_SCHEMA_DEPTH deep."""
    from jsonschema import Draft202012Validator, SchemaError

    if not isinstance(schema, dict):
        raise ScenarioError(source, field_name, "schema is not a mapping", "give a JSON Schema object")
    if _depth(schema) > MAX_SCHEMA_DEPTH:
        raise ScenarioError(source, field_name, f"nests deeper than {MAX_SCHEMA_DEPTH} levels", "flatten it with $defs and $ref")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise ScenarioError(source, field_name, f"invalid JSON Schema at {where}: {exc.message}", "correct the schema") from None
    except RecursionError:
        raise ScenarioError(source, field_name, "too deeply nested to check", "flatten it with $defs and $ref") from None
    if problem := ref_problem(schema):
        raise ScenarioError(source, field_name, problem, "point every $ref at a part of this schema (#/$defs/...) that is not a loop of $refs")


def _depth(value: Any) -> int:
    """How deep ``value``'s objects and lists nest, without recursion (a hostile schema may nest thousands deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


# Keywords whose subschemas apply to the same instance: a $ref reached through only these consumes no part
# of the value, so a path of them back to a schema is a loop validation never leaves.
_IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "dependentSchemas")


def ref_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema``'s ``$ref``s would break validation: one that does not resolve inside the schema (remote
    ones included: validation runs offline), or a loop of them; None when there is none. Pure."""
    anchors = {}  # plain-name fragments: $anchor (2019-09 on), and "$id"/"id": "#name" (drafts 4 to 7)
    for node in _subschemas(schema):
        if isinstance(node.get("$anchor"), str):
            anchors[node["$anchor"]] = node
        for key in ("$id", "id"):
            if isinstance(node.get(key), str) and node[key].startswith("#") and len(node[key]) > 1:
                anchors[node[key][1:]] = node

    def target(ref: str) -> Any:
        if not ref.startswith("#"):
            return None
        fragment = unquote(ref[1:])
        if fragment and not fragment.startswith("/"):
            return anchors.get(fragment)
        node: Any = schema
        for part in fragment.split("/")[1:] if fragment else ():
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node

    for node in _subschemas(schema):
        ref = node.get("$ref")
        if isinstance(ref, str) and not isinstance(target(ref), dict | bool):
            return f"$ref {ref!r} does not resolve inside the schema" + ("" if ref.startswith("#") else " (no remote references: validation runs offline)")

    def in_place(node: dict[str, Any]) -> list[Any]:
        found: list[Any] = []
        for key in _IN_PLACE:
            value = node.get(key)
            if key == "$ref" and isinstance(value, str):
                found.append(target(value))
            elif key == "dependentSchemas" and isinstance(value, dict):
                found.extend(value.values())
            elif isinstance(value, list):
                found.extend(value)
            elif isinstance(value, dict):
                found.append(value)
        return [child for child in found if isinstance(child, dict)]

    done: set[int] = set()
    for start in _subschemas(schema):
        if id(start) in done:
            continue
        path, stack = [start], [iter(in_place(start))]
        while stack:
            child = next(stack[-1], None)
            if child is None:
                done.add(id(path.pop()))
                stack.pop()
            elif any(child is node for node in path):
                return f"$ref loop: {child.get('$ref') or 'a subschema'} leads back to itself without validating any part of the value"
            elif id(child) not in done:
                path.append(child)
                stack.append(iter(in_place(child)))
    return None


# Where a schema holds subschemas: keyword -> a schema, a list of them, or a mapping of names to them.
_SCHEMA_KEYWORDS = {
    **dict.fromkeys(("not", "if", "then", "else", "items", "contains", "additionalProperties", "additionalItems",
                     "unevaluatedProperties", "unevaluatedItems", "propertyNames"), "one"),
    **dict.fromkeys(("allOf", "anyOf", "oneOf", "prefixItems"), "list"),
    **dict.fromkeys(("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"), "map"),
}  # fmt: skip


def _subschemas(schema: Any) -> list[dict[str, Any]]:
    """Every subschema of ``schema`` (itself included), by its schema keywords only, without recursion:
    a ``const`` or ``default`` value that looks like a schema is data, not a subschema."""
    found, stack = [], [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        found.append(node)
        for key, kind in _SCHEMA_KEYWORDS.items():
            value = node.get(key)
            if kind == "one":
                stack.append(value)
            elif kind == "list" and isinstance(value, list):
                stack.extend(value)
            elif kind == "map" and isinstance(value, dict):
                stack.extend(value.values())
    return found


def _smoke_test(scenario: Scenario) -> None:
    """Run the generator once per split so generator bugs surface at load time, not mid-benchmark."""
    from jsonschema import Draft202012Validator, FormatChecker

    for split, (start, _) in scenario.splits.items():
        try:
            sample = scenario.sample(start)
        except Exception as exc:  # noqa: BLE001 - any generator failure is a scenario error
            raise ScenarioError(
                scenario.source, "generator", f"raised {type(exc).__name__}: {exc} (seed {start}, {split})", "fix the generator"
            ) from None
        checks = [(t.schema, t.expected) for t in sample.turns if t.schema is not None and t.expected is not None]
        if scenario.is_json and sample.schema is not None and not sample.turns:
            checks.append((sample.schema, sample.answer))
        for schema, answer in checks:
            if schema is not scenario.schema:
                check_schema(schema, scenario.source, "generator (per-request schema)")
            errors = list(Draft202012Validator(schema, format_checker=FormatChecker()).iter_errors(answer))
            if errors:
                raise ScenarioError(
                    scenario.source,
                    "generator",
                    f"ground truth for seed {start} violates the schema: {errors[0].message}",
                    "make the generator's answer match the schema",
                )
