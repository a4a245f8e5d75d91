"""Training text for schemas the model has never seen: records with made-up fields, and real schemas.

Two sources broaden the embedded model beyond the built-in scenarios, so that a user's own schemas get
short, well-closed values instead of strings that run to max_tokens:

- ``record_pair(seed)``: a record of a random kind with random fields (names, ids, amounts, dates, flags,
  choices) is written as prose in the prompt, and the answer copies its values into JSON. The kinds and
  field names come from broad word lists, so no user's schema is in them by design.
- ``schema_pairs(root)``: JSONSchemaBench entries (schema + documents labeled valid), prompted exactly as
  the harness prompts a JSONSchemaBench entry (``SCHEMA_PROMPT``). The JME subset is held out: it is the
  benchmark's unseen-schema workload (``--scenario ../shared/datasets/jsonschemabench/JME``).

Answers are compact JSON, like the built-in scenarios' answers.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dspark_bench.scenarios.dataset import SCHEMA_PROMPT

HELD_OUT_SUBSETS = ("JME",)
MAX_SCHEMA_CHARS = 1800  # prompts past ~900 tokens do not fit the 1024-token context with their answer
MAX_ANSWER_CHARS = 700

KINDS = (
    "invoice", "shipment", "booking", "patient visit", "job application", "insurance claim", "purchase order",
    "support ticket", "flight", "hotel stay", "rental", "subscription", "payment", "refund", "event",
    "meeting", "course enrollment", "vehicle", "property listing", "loan", "donation", "membership",
    "repair order", "delivery", "contract", "expense report", "lab result", "device", "account", "recipe",
    "book", "movie", "song", "employee", "customer", "supplier", "warehouse item", "parcel", "trip", "permit",
)  # fmt: skip
NOUNS = (
    "id", "name", "title", "code", "number", "reference", "vendor", "customer", "owner", "agent", "city",
    "country", "address", "email", "phone", "status", "category", "type", "level", "priority", "amount",
    "total", "price", "cost", "fee", "balance", "quantity", "count", "weight", "size", "duration", "rating",
    "score", "date", "start", "end", "due", "deadline", "created", "updated", "currency", "method", "channel",
    "model", "brand", "color", "department", "project", "region", "plan", "tier", "language", "note", "reason",
)  # fmt: skip
QUALIFIERS = (
    "", "", "", "first", "last", "full", "billing", "shipping", "contact", "primary", "net", "gross", "tax",
    "order", "account", "item", "unit", "start", "end", "due", "issue", "return", "member", "case", "policy",
)  # fmt: skip
FIRST = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivan", "Jin", "Kofi", "Lena", "Mateo", "Nia",
         "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tomoko", "Uma", "Viktor", "Wei", "Yara", "Zoe")  # fmt: skip
LAST = ("Adams", "Brown", "Costa", "Dubois", "Evans", "Fischer", "Garcia", "Haddad", "Ito", "Jensen", "Kim", "Lopez",
        "Müller", "Novak", "Okafor", "Patel", "Rossi", "Silva", "Tanaka", "Wang", "Yilmaz", "Zhang")  # fmt: skip
WORDS = ("north", "river", "blue", "delta", "summit", "harbor", "maple", "orbit", "pine", "silver", "stone", "cedar",
         "nova", "apex", "lumen", "atlas", "echo", "vista", "granite", "coral", "falcon", "meadow")  # fmt: skip
CITIES = ("Lisbon", "Osaka", "Denver", "Nairobi", "Toronto", "Krakow", "Lima", "Austin", "Seoul", "Porto", "Dublin",
          "Perth", "Oslo", "Cairo", "Quito", "Hanoi", "Zurich", "Boston")  # fmt: skip
CHOICES = (("low", "medium", "high"), ("open", "pending", "closed"), ("new", "used", "refurbished"),
           ("card", "cash", "transfer"), ("draft", "approved", "rejected"), ("basic", "pro", "enterprise"),
           ("red", "green", "blue", "black"), ("small", "medium", "large"), ("EUR", "USD", "GBP", "JPY", "CNY"))  # fmt: skip
STYLES = ("snake", "camel", "plain")
PERSON_NOUNS = ("name", "customer", "owner", "agent")  # a field so named holds a person's name
PLACE_NOUNS = ("city", "country", "region", "address")  # ... a place


def _field_name(rng: random.Random, style: str) -> tuple[str, str]:
    """(field name, its noun): the noun decides what kind of value the field holds."""
    noun = rng.choice(NOUNS)
    parts = [p for p in (rng.choice(QUALIFIERS), noun) if p]
    if style == "camel":
        return parts[0] + "".join(p.title() for p in parts[1:]), noun
    return ("_".join(parts) if style == "snake" else "".join(parts)), noun


def _value(rng: random.Random, noun: str) -> tuple[Any, str]:
    """(JSON value, how the prompt's prose writes it), by what the field's last word suggests."""
    if noun in ("id", "code", "number", "reference"):
        text = f"{rng.choice(string.ascii_uppercase)}{rng.choice(string.ascii_uppercase)}-{rng.randint(100, 99999)}"
        return text, text
    if noun in PERSON_NOUNS + ("vendor",):
        text = f"{rng.choice(FIRST)} {rng.choice(LAST)}" if noun != "vendor" else f"{rng.choice(WORDS).title()} {rng.choice(('Ltd', 'Inc', 'GmbH', 'Co'))}"
        return text, text
    if noun in PLACE_NOUNS:
        text = rng.choice(CITIES) if noun != "address" else f"{rng.randint(1, 999)} {rng.choice(WORDS).title()} Street, {rng.choice(CITIES)}"
        return text, text
    if noun == "email":
        text = f"{rng.choice(FIRST).lower()}.{rng.choice(LAST).lower()}@{rng.choice(WORDS)}.com"
        return text, text
    if noun == "phone":
        text = f"+{rng.randint(1, 99)} {rng.randint(100, 999)} {rng.randint(1000, 9999)}"
        return text, text
    if noun in ("amount", "total", "price", "cost", "fee", "balance"):
        value = round(rng.uniform(1, 9999), rng.choice((0, 2)))
        value = int(value) if value == int(value) else value
        return value, str(value)
    if noun in ("quantity", "count", "rating", "score", "level", "duration", "weight", "size"):
        value = rng.randint(0, 500)
        return value, str(value)
    if noun in ("date", "start", "end", "due", "deadline", "created", "updated"):
        text = f"20{rng.randint(20, 29)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        return text, text
    if noun in ("status", "category", "type", "priority", "currency", "method", "channel", "plan", "tier", "color"):
        text = rng.choice(rng.choice(CHOICES))
        return text, text
    if rng.random() < 0.3:
        flag = rng.random() < 0.5
        return flag, "yes" if flag else "no"
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
    return text, text


def record_example(rng: random.Random) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """(chat messages, the record the answer holds) for one made-up extraction request."""
    kind = rng.choice(KINDS)
    style = rng.choice(STYLES)
    record: dict[str, Any] = {}
    prose: list[str] = []
    for _ in range(rng.randint(2, 7)):
        name, noun = _field_name(rng, style)
        if name in record:
            continue
        value, written = _value(rng, noun)
        record[name] = value
        label = name.replace("_", " ") if style != "camel" else name
        prose.append(rng.choice((f"{label}: {written}", f"{label} is {written}", f"the {label} {written}")))
    order = list(record)
    rng.shuffle(prose)
    text = f"{kind.title()} record. " + "; ".join(prose) + "."
    shape = rng.random()
    if shape < 0.4:
        messages = [{"role": "user", "content": f"Extract the {kind} fields as JSON ({', '.join(order)}).\n\n{text}"}]
    elif shape < 0.7:
        messages = [
            {"role": "system", "content": f"You extract {kind} records. Answer with JSON only, keys: {', '.join(order)}."},
            {"role": "user", "content": text},
        ]
    else:
        messages = [{"role": "user", "content": f"Return a JSON object with the keys {', '.join(order)} for this {kind}:\n{text}"}]
    return messages, record


def record_pair(seed: int) -> tuple[list[dict[str, str]], str]:
    messages, record = record_example(random.Random(seed))
    return messages, compact(record)


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def schema_pairs(root: Path) -> Iterator[tuple[list[dict[str, str]], str]]:
    """(messages, answer) per document labeled valid, for entries whose prompt and answer fit the context."""
    for path in sorted(root.glob("*/*.json")):
        if path.parent.name in HELD_OUT_SUBSETS:
            continue
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        schema_text = json.dumps(entry.get("schema"), ensure_ascii=False)
        if not isinstance(entry.get("schema"), dict) or len(schema_text) > MAX_SCHEMA_CHARS:
            continue
        messages = [{"role": "user", "content": SCHEMA_PROMPT.format(schema=schema_text)}]
        for test in entry.get("tests", []):
            if test.get("valid") is True and len(answer := compact(test.get("data"))) <= MAX_ANSWER_CHARS:
                yield messages, answer


def write_schema_pairs(root: Path, out: Path) -> int:
    """Extract ``schema_pairs`` to a JSON Lines file (small enough to carry where the dataset is not)."""
    count = 0
    with out.open("w", encoding="utf-8") as f:
        for messages, answer in schema_pairs(root):
            f.write(json.dumps({"messages": messages, "completion": answer}, ensure_ascii=False) + "\n")
            count += 1
    return count


def read_schema_pairs(path: Path) -> list[tuple[list[dict[str, str]], str]]:
    """From a JSONSchemaBench folder, or from the JSON Lines file ``write_schema_pairs`` made."""
    if path.is_dir():
        return list(schema_pairs(path))
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(row["messages"], row["completion"]) for row in rows]
