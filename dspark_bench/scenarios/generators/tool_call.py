"""Agent tool calls: a tool list in the prompt, a user request; the answer is the right tool's arguments.

The tools and their argument schemas live in the scenario file (``params.tools``); this module knows how
to phrase a request for each tool and what its arguments are. The request's schema is the chosen
tool's ``parameters``, so every request carries its own schema.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from dspark_bench.scenarios.generators import politeness, pools
from dspark_bench.scenarios.session import signature
from dspark_bench.scenarios.spec import Example, Scenario

CITIES = [c for c, _ in pools.EN_CITIES] + ["London", "Paris", "Tokyo", "Berlin", "Sydney", "Toronto"]
ZH_CITIES = ["北京", "上海", "广州", "深圳", "杭州", "成都", "武汉", "西安", "南京", "重庆"]


def _date(rng: random.Random) -> str:
    return f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def _weather(rng: random.Random) -> tuple[dict[str, Any], str]:
    if rng.random() < 0.3:
        city = rng.choice(ZH_CITIES)
        args: dict[str, Any] = {"city": city}
        text = f"{city}明天天气怎么样？"
        if rng.random() < 0.5:
            args["days"] = rng.randint(2, 7)
            text = f"帮我查一下{city}未来{args['days']}天的天气。"
        return args, text
    city = rng.choice(CITIES)
    args = {"city": city}
    unit = rng.choice([None, "celsius", "fahrenheit"])
    days = rng.choice([None, rng.randint(1, 7)])
    if unit:
        args["unit"] = unit
    if days:
        args["days"] = days
    text = rng.choice(["What's the weather like in {c}", "Weather forecast for {c}", "Is it going to rain in {c}"]).format(c=city)
    if days:
        text += f" over the next {days} days"
    if unit:
        text += f", in {unit}"
    return args, text + "?"


def _flight(rng: random.Random) -> tuple[dict[str, Any], str]:
    origin, destination = rng.sample(CITIES, 2)
    args: dict[str, Any] = {"origin": origin, "destination": destination, "date": _date(rng), "passengers": rng.randint(1, 6)}
    cabin = rng.choice([None, "economy", "premium_economy", "business", "first"])
    people = "me" if args["passengers"] == 1 else f"{args['passengers']} people"
    text = rng.choice(
        [
            "Book a flight from {o} to {d} on {t} for {p}",
            "I need to fly {o} -> {d} on {t}, {p}",
            "Find {p} a flight on {t} from {o} to {d}",
        ]
    ).format(o=origin, d=destination, t=args["date"], p=people)
    if cabin:
        args["cabin"] = cabin
        text += f", {cabin.replace('_', ' ')} class"
    return args, text + "."


def _event(rng: random.Random) -> tuple[dict[str, Any], str]:
    title = rng.choice(
        ["Team sync", "Budget review", "Dentist", "Project kickoff", "1:1 with manager", "Design review", "Lunch with Anna"]
    )
    start = {"date": _date(rng), "time": f"{rng.randint(8, 18):02d}:{rng.choice(['00', '15', '30', '45'])}"}
    duration = rng.choice([15, 30, 45, 60, 90, 120])
    args: dict[str, Any] = {"title": title, "start": start, "duration_minutes": duration}
    text = f"Schedule '{title}' on {start['date']} at {start['time']} for {duration} minutes"
    if rng.random() < 0.5:
        attendees = [pools.en_name(rng) for _ in range(rng.randint(1, 3))]
        args["attendees"] = attendees
        text += " with " + ", ".join(attendees)
    return args, text + "."


def _products(rng: random.Random) -> tuple[dict[str, Any], str]:
    category, queries = rng.choice(
        [
            ("electronics", ["wireless earbuds", "power bank", "bluetooth speaker", "gaming mouse"]),
            ("clothing", ["down jacket", "running shoes", "denim jeans", "cotton t-shirt"]),
            ("home", ["air fryer", "electric kettle", "desk lamp", "humidifier"]),
            ("sports", ["yoga mat", "dumbbell set", "jump rope", "hiking poles"]),
            ("books", ["picture book", "cookbook", "sci-fi novel"]),
            ("beauty", ["face cream", "hand cream", "shampoo"]),
        ]
    )
    query = rng.choice(queries)
    args: dict[str, Any] = {"query": query, "category": category}
    text = f"Search {category} for {query}"
    if rng.random() < 0.5:
        args["max_price"] = pools.money(rng, 1000, 50000)
        text += f" under ${pools.fmt_number(args['max_price'])}"
    sort_by = rng.choice([None, "price_asc", "price_desc", "rating"])
    if sort_by:
        args["sort_by"] = sort_by
        text += {"price_asc": ", cheapest first", "price_desc": ", most expensive first", "rating": ", best rated first"}[sort_by]
    return args, text + "."


def _thermostat(rng: random.Random) -> tuple[dict[str, Any], str]:
    room = rng.choice(["living_room", "bedroom", "kitchen", "office"])
    temperature = rng.choice([18, 19, 20, 21, 22, 23, 24, 25, 20.5, 21.5, 22.5])
    mode = rng.choice(["heat", "cool", "auto"])
    text = rng.choice(
        ["Set the {r} to {t} degrees, {m} mode.", "Make the {r} {t}°C using {m}.", "Thermostat: {r}, {t} degrees, mode {m}."]
    )
    return {"room": room, "temperature": temperature, "mode": mode}, text.format(r=room.replace("_", " "), t=temperature, m=mode)


def _currency(rng: random.Random) -> tuple[dict[str, Any], str]:
    source, target = rng.sample(["USD", "EUR", "CNY", "JPY", "GBP"], 2)
    amount = pools.money(rng, 100, 500000)
    text = rng.choice(["Convert {a} {s} to {t}.", "How much is {a} {s} in {t}?", "{a} {s} -> {t} please."])
    return {"amount": amount, "from": source, "to": target}, text.format(a=pools.fmt_number(amount), s=source, t=target)


FILLERS: dict[str, Callable[[random.Random], tuple[dict[str, Any], str]]] = {
    "get_weather": _weather,
    "book_flight": _flight,
    "create_event": _event,
    "search_products": _products,
    "set_thermostat": _thermostat,
    "convert_currency": _currency,
}


def generate(rng: random.Random, scenario: Scenario) -> Example:
    tools: list[dict[str, Any]] = scenario.params["tools"]
    missing = [t["name"] for t in tools if t["name"] not in FILLERS]
    if missing:
        raise KeyError(f"no request phrasing for tools {missing}; add them to FILLERS in {__name__}")
    target = rng.choice(tools)
    shown = rng.sample([t for t in tools if t is not target], rng.randint(1, 3)) + [target]
    rng.shuffle(shown)
    args, request = FILLERS[target["name"]](rng)
    # Keys in schema order: constrained decoders emit properties in that order.
    ordered = {key: args[key] for key in target["parameters"]["properties"] if key in args}
    prompt = (
        "You can call these tools:\n"
        + "\n".join(signature(t) for t in shown)
        + f"\n\nUser: {request}\nReply with only the JSON arguments for the right tool."
        + politeness.closing(rng, chinese=False)
    )
    return Example(messages=[{"role": "user", "content": prompt}], answer=ordered, schema=target["parameters"])
