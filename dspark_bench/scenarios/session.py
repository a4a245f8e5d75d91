"""Agent sessions: a conversation of several turns, each answered with a tool call's JSON arguments.

A session's turns are sent one after another by the same user, each with the conversation so far: the
earlier turns' messages, the answers the server gave, and the last tool's result, which the scenario
makes up and folds into the next user message (a plain user message: every chat template takes it, where
``tool`` roles need tool-call ids and some templates insist that user and assistant alternate). Each
answer is checked against the called tool's parameters; a session ends at its last turn or at its first
answer that is not valid. Each turn's prompt extends the last one, so a prefix cache can reuse it.

Sessions come from the shipped generator (``scenarios/defs/agent_sessions.yaml``) or from a user's file:
JSON Lines, one session per line::

    {"tools": [{"name": "get_weather", "description": "...", "parameters": {JSON Schema}}],
     "turns": [{"content": "Weather in Paris?", "tool": "get_weather",
                "arguments": {"city": "Paris"}, "result": {"sky": "sunny"}},
               {"content": "And in Rome?", "tool": "get_weather"}],
     "max_tokens": 160, "tags": ["travel"]}

``tools``: the tools shown to the model (OpenAI's ``{"type": "function", "function": {...}}`` form is read
too); optional. Per turn: ``content`` (required); ``tool`` (a name in ``tools``: its parameters are the
answer's schema) or ``schema`` (a JSON answer's own schema), or neither (any JSON object); ``arguments``:
the expected answer, optional, scored as field accuracy; ``result``: what the tool returned, folded into
the next turn (default ``{"status": "ok"}``). ``max_tokens`` and ``tags`` as for dataset lines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dspark_bench.scenarios.dataset import (
    ENCODING,
    EVAL_SEEDS,
    TRAIN_SEEDS,
    DatasetScenario,
    limit_and_tags,
    line_error,
    rows_of,
    scenario_name,
)
from dspark_bench.scenarios.spec import Mode, Sample, ScenarioError, Split, Turn, check_schema

INSTRUCTION = "Reply with only the JSON arguments for the right tool."
DEFAULT_RESULT: dict[str, Any] = {"status": "ok"}
SESSION_FIELDS = ("tools", "turns", "max_tokens", "tags", "description", "meta")
TURN_FIELDS = ("content", "tool", "schema", "arguments", "result")


def signature(tool: dict[str, Any]) -> str:
    """One line per tool, derived from its schema: ``name(arg: type, opt?: a|b): description``."""
    params = tool.get("parameters") or {}
    required = set(params.get("required", []))
    args = []
    for name, prop in (params.get("properties") or {}).items():
        prop = prop if isinstance(prop, dict) else {}
        kind = "|".join(str(v) for v in prop["enum"]) if "enum" in prop else prop.get("type", "any")
        if kind == "array":
            kind = f"{(prop.get('items') or {}).get('type', 'any')}[]"
        args.append(f"{name}{'' if name in required else '?'}: {kind}")
    return f"- {tool['name']}({', '.join(args)}): {tool.get('description', '')}"


def tools_preamble(tools: list[dict[str, Any]]) -> str:
    return "You can call these tools:\n" + "\n".join(signature(t) for t in tools) + "\n\n"


def session_turns(tools: list[dict[str, Any]], steps: list[dict[str, Any]]) -> tuple[Turn, ...]:
    """The turns of a session from its steps (``content``, ``tool``, ``schema``, ``arguments``, ``result``):
    the tool list before the first request, each tool's result before the next request. Pure."""
    by_name = {tool["name"]: tool for tool in tools}
    turns = []
    for number, step in enumerate(steps):
        parts = [tools_preamble(tools)] if number == 0 and tools else []
        if number > 0:
            previous = steps[number - 1]
            result = previous.get("result", DEFAULT_RESULT)
            text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
            parts.append(f"{previous.get('tool') or 'The tool'} returned: {text}\n\n")
        parts.append(f"User: {step['content']}\n{INSTRUCTION}" if tools else step["content"])
        tool = step.get("tool")
        schema = step.get("schema") if tool is None else by_name[tool].get("parameters")
        turns.append(Turn("".join(parts), schema, step.get("arguments"), tool))
    return tuple(turns)


def is_session_file(path: Path) -> bool:
    """A JSON Lines (or JSON) file whose first row is a session (it has ``turns``)."""
    if path.suffix.lower() not in (".jsonl", ".json") or not path.is_file():
        return False
    try:
        with path.open(encoding=ENCODING) as f:
            head = f.read(65536)
        first = head.lstrip()
        if path.suffix.lower() == ".json":
            first = first.removeprefix("[").lstrip()
        row = json.JSONDecoder().raw_decode(first)[0]
    except (ValueError, OSError, UnicodeDecodeError):
        return False
    return isinstance(row, dict) and "turns" in row


def _tools(path: Path, number: int, raw: Any) -> list[dict[str, Any]]:
    fix = 'write "tools": [{"name": "get_weather", "description": "...", "parameters": {"type": "object", ...}}]'
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise line_error(path, number, "tools", "not a list", fix)
    tools = []
    for index, tool in enumerate(raw):
        if isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("function"), dict):
            tool = tool["function"]  # OpenAI's tools form
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool["name"]:
            raise line_error(path, number, f"tools[{index}]", "a tool without a name", fix)
        parameters = tool.get("parameters", {"type": "object"})
        check_schema(parameters, path, f"line {number}: tools[{index}].parameters")
        tools.append({"name": tool["name"], "description": str(tool.get("description", "")), "parameters": parameters})
    return tools


def _session(path: Path, number: int, raw: Any) -> dict[str, Any]:
    """One line, checked: its turns, max_tokens and tags; raises ScenarioError naming the line and the fix."""
    if not isinstance(raw, dict):
        raise line_error(path, number, "(line)", "not an object", 'write {"turns": [{"content": "..."}]}')
    if unknown := sorted(set(raw) - set(SESSION_FIELDS)):
        raise line_error(path, number, unknown[0], "unknown field of a session", f"use {', '.join(SESSION_FIELDS[:4])}")
    tools = _tools(path, number, raw.get("tools"))
    names = {tool["name"] for tool in tools}
    steps = raw.get("turns")
    if not isinstance(steps, list) or not steps:
        raise line_error(path, number, "turns", "not a non-empty list", 'write "turns": [{"content": "...", "tool": "..."}]')
    for index, step in enumerate(steps):
        where = f"turns[{index}]"
        if not isinstance(step, dict):
            raise line_error(path, number, where, "not an object", 'write {"content": "...", "tool": "..."}')
        if unknown := sorted(set(step) - set(TURN_FIELDS)):
            raise line_error(path, number, f"{where}.{unknown[0]}", "unknown field of a turn", f"use {', '.join(TURN_FIELDS)}")
        if not isinstance(step.get("content"), str) or not step["content"].strip():
            raise line_error(path, number, f"{where}.content", "not a non-empty string", 'write "content": "the user\'s request"')
        tool = step.get("tool")
        if tool is not None and tool not in names:
            known = ", ".join(sorted(names)) or "none: add a tools list"
            raise line_error(path, number, f"{where}.tool", f"{tool!r} is not in the line's tools", f"name one of the tools ({known})")
        if tool is not None and "schema" in step:
            raise line_error(path, number, where, "gives both tool and schema", "keep one: a tool's parameters are its schema")
        if step.get("schema") is not None:
            check_schema(step["schema"], path, f"line {number}: {where}.schema")
    turns = session_turns(tools, steps)
    for index, turn in enumerate(turns):
        if turn.schema is not None and turn.expected is not None:
            from jsonschema import Draft202012Validator, FormatChecker

            if error := next(iter(Draft202012Validator(turn.schema, format_checker=FormatChecker()).iter_errors(turn.expected)), None):
                raise line_error(path, number, f"turns[{index}].arguments", f"break the turn's schema: {error.message}",
                                 "correct the arguments or the tool's parameters")  # fmt: skip
    max_tokens, tags = limit_and_tags(path, number, raw)
    return {"turns": turns, "max_tokens": max_tokens, "tags": tags}


class SessionScenario(DatasetScenario):
    """A user's sessions, one per line, cycled in file order (seed n is line n mod lines)."""

    def sample(self, seed: int) -> Sample:
        start = self.splits[Split.TRAIN][0] if seed >= self.splits[Split.TRAIN][0] else self.splits[Split.EVAL][0]
        row = self.rows[(seed - start) % len(self.rows)]
        return Sample(self.name, seed, [], None, None, True, max_tokens=row["max_tokens"], tags=row["tags"], turns=row["turns"])


def load_sessions(path: Path, name: str | None = None, description: str | None = None) -> SessionScenario:
    """The scenario of a session file; raises ScenarioError naming the line, the field and the fix."""
    rows = tuple(_session(path, number, raw) for number, raw in rows_of(path))
    if not rows:
        raise ScenarioError(path, "(file)", "holds no sessions", 'add one session per line: {"turns": [...]}')
    all_schemas = all(turn.schema is not None for row in rows for turn in row["turns"])
    return SessionScenario(
        name=name or scenario_name(path),
        description=description or f"agent sessions from {path}",
        output="json",
        modes=(Mode.PROMPT, Mode.JSON_OBJECT, *((Mode.JSON_SCHEMA,) if all_schemas else ())),
        splits={Split.TRAIN: TRAIN_SEEDS, Split.EVAL: EVAL_SEEDS},
        generator=_no_generator,
        source=path,
        rows=rows,
    )


def _no_generator(*_args: Any) -> Any:
    raise AssertionError("session files build samples from their rows")  # see SessionScenario.sample
