"""Agent sessions: several tool calls in one conversation, each turn's request answered with the right
tool's arguments, then the tool's (made-up) result folded into the next turn (``scenarios.session``).

The tools, and how each request is phrased, are the tool_call scenario's (``params.tools_from``): one
owner for the tool list. Each session calls ``params.turns`` = [fewest, most] tools, different ones, with
one or two more tools shown that it never calls.
"""

from __future__ import annotations

import random
from functools import cache
from typing import Any

from dspark_bench.scenarios.generators import pools
from dspark_bench.scenarios.generators.tool_call import FILLERS
from dspark_bench.scenarios.session import session_turns
from dspark_bench.scenarios.spec import Example, Scenario


@cache
def _tools(scenario_name: str) -> tuple[dict[str, Any], ...]:
    from dspark_bench.scenarios.load import load_scenario

    return tuple(load_scenario(scenario_name).params["tools"])


def _ref(rng: random.Random, prefix: str) -> str:
    return f"{prefix}-{rng.randint(10000, 99999)}"


def result(rng: random.Random, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """What the tool returns for ``args``: small, plausible, seeded."""
    if tool == "get_weather":
        sky = ["sunny", "cloudy", "rain", "showers", "clear"]
        days = min(int(args.get("days", 1)), 3)
        return {"city": args["city"], "forecast": [{"day": d + 1, "high": rng.randint(8, 32), "sky": rng.choice(sky)} for d in range(days)]}
    if tool == "book_flight":
        return {"booking": _ref(rng, "BK"), "status": "confirmed", "price": pools.money(rng, 9000, 120000)}
    if tool == "create_event":
        return {"event": _ref(rng, "EV"), "status": "created"}
    if tool == "search_products":
        return {"results": [{"sku": _ref(rng, "SKU"), "price": pools.money(rng, 500, 40000)} for _ in range(2)]}
    if tool == "set_thermostat":
        return {"room": args["room"], "status": "ok", "current": rng.choice([17.5, 19.0, 20.5, 22.0])}
    if tool == "convert_currency":
        rate = round(rng.uniform(0.1, 8.0), 4)
        return {"rate": rate, "converted": round(args["amount"] * rate, 2)}
    return {"status": "ok"}


def generate(rng: random.Random, scenario: Scenario) -> Example:
    tools = list(_tools(scenario.params["tools_from"]))
    fewest, most = scenario.params["turns"]
    called = rng.sample(tools, rng.randint(fewest, most))
    shown = called + rng.sample([t for t in tools if t not in called], min(rng.randint(1, 2), len(tools) - len(called)))
    rng.shuffle(shown)
    steps = []
    for tool in called:
        args, request = FILLERS[tool["name"]](rng)
        ordered = {key: args[key] for key in tool["parameters"]["properties"] if key in args}  # schema order
        steps.append({"content": request, "tool": tool["name"], "arguments": ordered, "result": result(rng, tool["name"], ordered)})
    return Example(messages=[], answer=None, turns=session_turns(shown, steps))
