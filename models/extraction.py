"""Training text for extraction into schemas of many shapes: prose that states values, and the JSON they fill.

``models.records`` teaches flat records; a user's schema nests objects and arrays, uses enums, numbers,
booleans, dates and optional fields, and its source text is a note, a form, a table or a ticket, in any order
and sometimes in another language. Each example here draws such a schema at random (field names and values
from ``records``' broad word lists; its kinds exclude the held-out domains of ``models.heldout``), writes its
values in one of several layouts, and answers with the compact JSON in the schema's key order:

- scalars: ids, names, places, emails, amounts, counts, dates (written as people write them; the answer
  normalises them to YYYY-MM-DD), enums, booleans (yes/no, true/false, ja/nein, ...), measurements whose key
  names the unit the text writes beside them ("weight_kg" from "12.7 kg"), ratings on a scale ("3/5" -> 3);
- a nested object (a contact, an address, a vendor) of two to four scalars;
- an array of objects (lines, items, entries) of one to four elements, its items' parts labelled or not
  ("atlas, 111, 2580.3; nova, 2, 19.5"), or an array of enum labels;
- optional fields that the text leaves out some of the time, and the answer then leaves out too.

The prompt asks for the fields by name, or gives the JSON Schema itself, as users do in json_schema mode.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from typing import Any, NamedTuple

from models.records import CHOICES, FIRST, KINDS, LAST, PERSON_NOUNS, PLACE_NOUNS, WORDS, _field_name, _value, compact

LANGUAGES = ("en", "en", "en", "de", "es", "fr")
YES_NO = {"en": ("yes", "no"), "de": ("ja", "nein"), "es": ("sí", "no"), "fr": ("oui", "non")}
IS = {"en": "is", "de": "ist", "es": "es", "fr": "est"}
NONE_WORD = {"en": "none", "de": "keine", "es": "ninguno", "fr": "aucun"}
MONTHS = {
    "en": ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"),
    "de": ("Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August", "September", "Oktober", "November", "Dezember"),
    "es": ("enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto", "septiembre", "octubre", "noviembre", "diciembre"),
    "fr": ("janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre", "octobre", "novembre", "décembre"),
}  # fmt: skip
GROUPS = ("contact", "address", "vendor", "customer", "owner", "location", "billing", "sender", "recipient", "device")
GROUP_PARTS = {"contact": ("name", "email", "phone"), "address": ("street", "city", "country"), "location": ("city", "region", "code"),
               "device": ("model", "brand", "code")}  # fmt: skip
LISTS = ("items", "lines", "entries", "parts", "tasks", "charges", "stops", "participants")
LIST_PARTS = (("name", "quantity", "price"), ("code", "count"), ("title", "status"), ("name", "amount"), ("description", "hours"))
TAGS = ("tags", "labels", "flags", "categories")
LAYOUTS = ("sentences", "lines", "table", "email", "notes", "report", "report")
# A number's unit: the key names it and the text writes it beside the value ("weight_kg": 12.7 from "12.7 kg"),
# or a rating on a scale ("3/5" -> 3, its schema bounded), as logs and forms write measurements.
UNITS = (("kg", " kg"), ("g", " g"), ("mm", " mm"), ("cm", " cm"), ("km", " km"), ("ml", " ml"), ("minutes", " min"),
         ("hours", " h"), ("days", " days"), ("pct", "%"), ("eur", " EUR"), ("usd", " USD"), ("m", " m"), ("seconds", " s"))  # fmt: skip
UNIT_SHARE, SCALE_SHARE = 0.25, 0.1
# A share of lists state their items' values without the parts' labels, in the parts' order ("atlas, 111, 2580.3;
# nova, 2, 19.5"), as a log lists what it saw.
BARE_ITEMS_SHARE = 0.4
# How field notes state a fact without the label in front: the value first, the label shortened to one of its
# words, in brackets, or after the value, as people write logs and memos (the label is not always the key).
NOTE_FORMS = ("{label}: {value}", "{value} ({label})", "{word} {value}", "{value}, {word}", "{label} {value}", "{word}: {value}")


class Fact(NamedTuple):
    """One thing the text states: its label, how the text writes it, and for a scalar its JSON value and schema."""

    label: str
    text: str
    value: Any = None
    schema: dict[str, Any] | None = None


# A share of names, places and phrases made up from syllables (no word list holds them): held-out data has its own.
FRESH_SHARE = 0.35
SYLLABLES = ("ka", "lo", "mi", "ra", "ten", "vor", "bel", "dun", "sa", "ri", "mo", "tal", "fen", "gor", "li", "na", "pe",
             "ru", "sol", "tam", "ve", "zi", "dor", "kel", "mar", "nis", "or", "pa", "quin", "sel", "tor", "ul", "wen", "yar")  # fmt: skip
PLACE_ENDS = ("Ridge", "Park", "Hill", "Bay", "Point", "Field", "Cross", "Green")


def _written_date(rng: random.Random, iso: str, language: str) -> str:
    year, month, day = (int(part) for part in iso.split("-"))
    forms = [iso, f"{day} {MONTHS[language][month - 1]} {year}"]
    if language == "en":
        forms += [f"{MONTHS['en'][month - 1]} {day}, {year}", f"{month:02d}/{day:02d}/{year}"]
    elif language == "de":
        forms.append(f"{day:02d}.{month:02d}.{year}")
    else:
        forms.append(f"{day:02d}/{month:02d}/{year}")
    return rng.choice(forms)


AMOUNTS = ("amount", "total", "price", "cost", "fee", "balance")


def _scalar(rng: random.Random, noun: str, language: str, schema: dict[str, Any] | None = None) -> tuple[Any, str, dict[str, Any]]:
    """(JSON value, how the text writes it, its schema) for a field whose last word is ``noun``; given the
    ``schema`` of the same field in an earlier row, a value it allows."""
    if schema is not None and "enum" in schema:
        value = rng.choice(schema["enum"])
        return value, value, schema
    if noun in ("street",):
        text = f"{rng.randint(1, 999)} {rng.choice(WORDS).title()} {rng.choice(('Street', 'Road', 'Avenue', 'Lane'))}"
        return text, text, {"type": "string"}
    if noun in ("description", "title"):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
        return text, text, {"type": "string"}
    if noun == "hours":
        value = rng.choice((0.5, 1, 1.5, 2, 3, 4, 8))
        return value, str(value), {"type": "number"}
    value, written = _value(rng, noun)
    if isinstance(value, bool):
        yes, no = YES_NO[language]
        return value, rng.choice(((yes, no), ("true", "false")))[0 if value else 1], {"type": "boolean"}
    if isinstance(value, int) and noun not in AMOUNTS:
        return value, written, {"type": "integer"}
    if isinstance(value, (int, float)):
        return value, written.replace(".", ",") if language in ("de", "fr", "es") and rng.random() < 0.5 else written, {"type": "number"}
    if len(value) == 10 and value[4] == "-" and value[7] == "-":
        return value, _written_date(rng, value, language), {"type": "string", "format": "date"}
    choices = next((c for c in CHOICES if value in c), None)
    if choices is not None:
        return value, value, {"enum": list(choices)}
    if noun in PERSON_NOUNS + PLACE_NOUNS + ("note", "reason", "project", "department") and rng.random() < FRESH_SHARE:
        value = written = _fresh(rng, noun)
    return value, written, {"type": "string"}


def _pseudo_word(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3)))


def _fresh(rng: random.Random, noun: str) -> str:
    """A name, place or phrase made of syllables, unlike any word list's: the value must be copied, not recalled."""
    if noun in PERSON_NOUNS:
        return f"{_pseudo_word(rng).title()} {_pseudo_word(rng).title()}"
    if noun in PLACE_NOUNS:
        return " ".join([_pseudo_word(rng).title()] + ([rng.choice(PLACE_ENDS)] if rng.random() < 0.5 else []))
    return " ".join(_pseudo_word(rng) for _ in range(rng.randint(1, 3)))


def _object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def extraction_example(rng: random.Random) -> tuple[list[dict[str, str]], dict[str, Any], dict[str, Any]]:
    """(chat messages, the answer, its JSON Schema) for one made-up extraction request."""
    kind, language = rng.choice(KINDS), rng.choice(LANGUAGES)
    style = rng.choice(("snake", "camel"))
    properties: dict[str, Any] = {}
    required: list[str] = []
    answer: dict[str, Any] = {}
    facts: list[Fact] = []

    def label(name: str) -> str:
        return name.replace("_", " ") if style == "snake" else name

    def key(*parts: str) -> str:
        return "_".join(parts) if style == "snake" else parts[0] + "".join(p.title() for p in parts[1:])

    shapes = ["scalar"] * rng.randint(2, 6) + rng.sample(["object", "list", "tags"], rng.randint(0, 2))
    rng.shuffle(shapes)
    for shape in shapes:
        if shape == "scalar":
            name, noun = _field_name(rng, style)
            if name in properties:
                continue
            value, written, schema = _scalar(rng, noun, language)
            spoken = label(name)
            if schema.get("type") in ("integer", "number") and (draw := rng.random()) < UNIT_SHARE + SCALE_SHARE:
                if draw < UNIT_SHARE:
                    suffix, unit = rng.choice(UNITS)
                    if suffix == "pct":  # a share: 0-100
                        value = rng.randint(0, 100)
                        written, schema = str(value), {"type": "integer", "minimum": 0, "maximum": 100}
                    name, written = key(name, suffix), written + unit
                else:
                    top = rng.choice((5, 10))
                    value, schema = rng.randint(1, top), {"type": "integer", "minimum": 1, "maximum": top}
                    written = rng.choice((f"{value}/{top}", f"{value} of {top}", f"{value} out of {top}"))
                if name in properties:
                    continue
            optional = rng.random() < 0.25
            properties[name] = schema
            if not optional:
                required.append(name)
            if optional and rng.random() < 0.5:
                continue  # an optional field the text does not state: absent from the answer too
            answer[name], _ = value, facts.append(Fact(spoken, written, value, schema))
        elif shape == "object":
            group = rng.choice([g for g in GROUPS if g not in properties] or ["details"])
            parts = GROUP_PARTS.get(group, ("name", rng.choice(("email", "phone", "city", "id"))))
            inner: dict[str, Any] = {}
            value_of: dict[str, Any] = {}
            stated = []
            for part in parts:
                value, written, schema = _scalar(rng, part, language)
                inner[part], value_of[part] = schema, value
                stated.append(f"{part} {written}")
            properties[group], answer[group] = _object_schema(inner, list(parts)), value_of
            required.append(group)
            facts.append(Fact(label(group), ", ".join(stated)))
        elif shape == "list":
            name = rng.choice([n for n in LISTS if n not in properties] or ["rows"])
            parts = rng.choice(LIST_PARTS)
            rows, stated = [], []
            item_schema: dict[str, Any] = {}
            bare = rng.random() < BARE_ITEMS_SHARE
            for _ in range(rng.randint(1, 4)):
                row, said = {}, []
                for part in parts:
                    value, written, schema = _scalar(rng, part if part != "name" else "title", language, item_schema.get(part))
                    row[part], item_schema[part] = value, schema
                    said.append(written if bare else f"{part} {written}")
                rows.append(row)
                stated.append(", ".join(said) if bare else "(" + ", ".join(said) + ")")
            properties[name] = {"type": "array", "items": _object_schema(item_schema, list(parts))}
            required.append(name)
            answer[name] = rows
            facts.append(Fact(label(name), "; ".join(stated)))
        else:
            name = rng.choice([n for n in TAGS if n not in properties] or ["marks"])
            options = rng.choice(CHOICES)
            chosen = rng.sample(options, rng.randint(0, min(3, len(options))))
            properties[name] = {"type": "array", "items": {"enum": list(options)}}
            required.append(name)
            answer[name] = chosen
            facts.append(Fact(label(name), ", ".join(chosen) or NONE_WORD[language]))
    # the answer in the schema's key order, as a grammar-constrained server writes it
    answer = {name: answer[name] for name in properties if name in answer}
    schema = _object_schema(properties, [name for name in properties if name in required])
    rng.shuffle(facts)
    text = _layout(rng, kind, facts, language)
    names = ", ".join(properties)
    ask = rng.random()
    if ask < 0.45:
        content = f"Extract the {kind} as JSON ({names}).\n\n{text}"
    elif ask < 0.75:
        content = f"Return the {kind} below as JSON matching this schema:\n{json.dumps(schema, ensure_ascii=False)}\n\n{text}"
    else:
        return [{"role": "system", "content": f"You turn {kind} notes into JSON with the keys {names}. Reply with JSON only."},
                {"role": "user", "content": text}], answer, schema  # fmt: skip
    return [{"role": "user", "content": content}], answer, schema


def _words(label: str) -> list[str]:
    """A label's words, camelCase split: "itemSize" -> ["item", "size"]."""
    return re.sub(r"([a-z])([A-Z])", r"\1 \2", label).replace("_", " ").lower().split() or [label]


def _layout(rng: random.Random, kind: str, facts: list[Fact], language: str) -> str:
    layout = rng.choice(LAYOUTS)
    if layout == "report" and language != "en":
        layout = "notes"  # the report's cue words are English
    if layout == "lines":
        return "\n".join(f"{f.label}: {f.text}" for f in facts)
    if layout == "table":
        return "| field | value |\n|---|---|\n" + "\n".join(f"| {f.label} | {f.text} |" for f in facts)
    if layout == "notes":
        said = [rng.choice(NOTE_FORMS).format(label=f.label, value=f.text, word=rng.choice(_words(f.label))) for f in facts]
        return rng.choice((". ", "; ", "\n")).join(said) + rng.choice((".", ""))
    if layout == "report":
        counts = Counter(_sort(f) for f in facts)
        clauses = [(_clause(rng, f, alone=counts[_sort(f)] == 1), f.text) for f in facts]
        return " ".join((c if c.startswith(text) else c[0].upper() + c[1:]) + "." for c, text in clauses)  # values as written
    sentences = " ".join(f"The {f.label} {IS[language]} {f.text}." if language == "en" else f"{f.label} {IS[language]} {f.text}." for f in facts)
    if layout == "email":
        who = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        return f"Hi,\n\nabout the {kind}: {sentences}\n\nThanks,\n{who}"
    return sentences


def _sort(fact: Fact) -> str:
    """What kind of value a fact states, as far as the text can tell it apart from the others without a label."""
    schema, noun = fact.schema or {}, _words(fact.label)[-1]
    if fact.value is None:
        return "group"
    if isinstance(fact.value, bool):
        return "yes/no"
    if "enum" in schema:
        return "enum " + " ".join(map(str, schema["enum"]))
    if schema.get("format") == "date":
        return "date"
    if isinstance(fact.value, (int, float)):
        return "number"
    return "person" if noun in PERSON_NOUNS else "place" if noun in PLACE_NOUNS else "text " + noun


def _clause(rng: random.Random, fact: Fact, alone: bool) -> str:
    """One fact as a report states it: a cue word from its label (or, where its kind of value is the only one of the
    record, no label at all: "by Ana Costa", "on 3 May 2026"), the value as the text writes it."""
    words = _words(fact.label)
    spoken, last, text, schema = " ".join(words), words[-1], fact.text, fact.schema or {}
    if fact.value is None:  # an object, a list or labels: stated with its parts
        return rng.choice((f"{spoken}: {text}", f"{text} ({spoken})"))
    if isinstance(fact.value, bool):
        forms = (f"{spoken} confirmed", f"{spoken}: yes", f"with {spoken}") if fact.value else (f"no {spoken}", f"{spoken}: no", f"without {spoken}")
        return rng.choice(forms)
    labelled = (f"{spoken} {text}", f"{text} ({spoken})", f"{last} {text}")
    if "enum" in schema:
        return rng.choice((f"{text} {last}", f"{last} was {text}") + ((f"it was {text}",) if alone else ()))
    if schema.get("format") == "date":
        return rng.choice(labelled + ((f"on {text}", f"dated {text}") if alone else ()))
    if isinstance(fact.value, (int, float)):
        return rng.choice((f"{text} {last}", f"{spoken} {text}", f"{last} of {text}"))
    if alone and last in PERSON_NOUNS:
        return rng.choice((f"by {text}", f"{text} handled it", f"{text} signed off"))
    if alone and last in PLACE_NOUNS:
        return rng.choice((f"at {text}", f"in {text}"))
    return rng.choice(labelled)


def extraction_pair(seed: int) -> tuple[list[dict[str, str]], str]:
    messages, answer, _ = extraction_example(random.Random(seed))
    return messages, compact(answer)
