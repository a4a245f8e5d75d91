"""Held-out extraction datasets: domains the embedded model's training never saw, each with its own schema.

    python -m models.heldout --out examples/heldout      # hives.jsonl, telescope.jsonl, sightings.jsonl

Each line is a harness dataset line (``dspark_bench.scenarios.dataset``): a prose prompt, the schema
(json_schema mode sends it), the expected ``answer`` (scored as field accuracy) and ``max_tokens``. The
prose states the values in several phrasings and orders, some in German or Spanish, dates and numbers as
people write them (the answer normalises them), optional fields sometimes absent; the schemas nest objects
and arrays and use enums, integers, numbers, booleans and formats.

Nothing here may feed training: beehive inspections, telescope observing logs and bird sightings are in none of
the training sources (``models.corpus.MIX``: no scenario, no kind of ``models.records.KINDS``, and no document
of JSONSchemaBench's training subsets mentions beekeeping, a telescope or birdwatching), and a test checks it.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from models.extraction import MONTHS  # month names as people write dates

LINES = 100
COMMITTED = Path(__file__).resolve().parents[1] / "examples" / "heldout"  # where the datasets are committed
PEOPLE = ("Ana Costa", "Ben Okafor", "Chen Wei", "Dara Novak", "Eli Haddad", "Fatima Rossi", "Goran Ito", "Hana Silva",
          "Ivan Lopez", "Jin Patel", "Kofi Jensen", "Lena Fischer", "Mateo Kim", "Nia Dubois", "Omar Tanaka", "Priya Evans")  # fmt: skip
TOWNS = ("Northbridge", "Eastfield", "Westmoor", "Southport", "Kingsbury", "Ashford", "Millbrook", "Redcliff",
         "Fairhaven", "Oakridge", "Stonebury", "Lakeside")  # fmt: skip


def _date(rng: random.Random) -> tuple[str, int, int, int]:
    year, month, day = rng.randint(2024, 2027), rng.randint(1, 12), rng.randint(1, 28)
    return f"{year}-{month:02d}-{day:02d}", year, month, day


def _written_date(rng: random.Random, language: str, year: int, month: int, day: int) -> str:
    name = MONTHS[language][month - 1]
    if language == "de":
        return rng.choice((f"{day}. {name} {year}", f"{day:02d}.{month:02d}.{year}"))
    if language == "es":
        return f"{day} de {name} de {year}"
    return rng.choice((f"{day} {name} {year}", f"{name} {day}, {year}", f"{year}-{month:02d}-{day:02d}"))


# ---------------------------------------------------------------------------------------------------- hives
TEMPERS = ("calm", "nervous", "aggressive")
TEMPERS_DE = {"calm": "ruhig", "nervous": "nervös", "aggressive": "aggressiv"}
TREATMENTS = ("oxalic acid", "formic acid", "thymol", "sugar syrup", "pollen patty")
HIVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "hive_id": {"type": "string"},
        "apiary": {"type": "string"},
        "date": {"type": "string", "format": "date"},
        "inspector": {"type": "string"},
        "queen_seen": {"type": "boolean"},
        "brood_frames": {"type": "integer", "minimum": 0, "maximum": 20},
        "temperament": {"enum": list(TEMPERS)},
        "weight_kg": {"type": "number", "minimum": 0},
        "treatments": {"type": "array", "items": {
            "type": "object", "properties": {"product": {"enum": list(TREATMENTS)}, "dose_ml": {"type": "number", "minimum": 0}},
            "required": ["product", "dose_ml"], "additionalProperties": False}},
    },
    "required": ["hive_id", "apiary", "date", "inspector", "queen_seen", "brood_frames", "temperament", "treatments"],
    "additionalProperties": False,
}  # fmt: skip
HIVE_ASK = ("Record this hive inspection as JSON: hive_id, apiary, date (YYYY-MM-DD), inspector, queen_seen, brood_frames, "
            "temperament, weight_kg if weighed, treatments given (product, dose_ml; empty list if none).")  # fmt: skip


def hive_line(rng: random.Random) -> dict[str, Any]:
    iso, year, month, day = _date(rng)
    hive = f"{rng.choice('ABCDEFGH')}{rng.randint(1, 40)}"
    apiary = f"{rng.choice(TOWNS)} {rng.choice(('Orchard', 'Meadow', 'Allotment', 'Farm'))}"
    inspector = rng.choice(PEOPLE)
    queen = rng.random() < 0.6
    brood = rng.randint(0, 12)
    temper = rng.choice(TEMPERS)
    weight = round(rng.uniform(12, 60), 1) if rng.random() < 0.5 else None
    treatments = [{"product": p, "dose_ml": float(rng.choice((5, 10, 25, 50, 250, 500)))} for p in rng.sample(TREATMENTS, rng.choice((0, 0, 1, 2)))]
    language = rng.choice(("en", "en", "en", "de"))
    when = _written_date(rng, language, year, month, day)
    if language == "de":
        parts = [f"Durchsicht Volk {hive}, Stand {apiary}, {when}, von {inspector}.",
                 "Königin gesehen." if queen else "Königin nicht gesehen.",
                 f"{brood} Brutwaben, Volk {TEMPERS_DE[temper]}."]  # fmt: skip
        if weight is not None:
            parts.append(f"Gewicht {str(weight).replace('.', ',')} kg.")
        given = ", ".join(f"{t['product']} {t['dose_ml']:g} ml" for t in treatments)
        parts.append(f"Behandlung: {given}." if given else "Keine Behandlung.")
    else:
        given = ", ".join(f"{t['dose_ml']:g} ml of {t['product']}" for t in treatments)
        parts = [
            rng.choice((f"Hive {hive} at {apiary}, inspected {when} by {inspector}.", f"{inspector} opened hive {hive} ({apiary}) on {when}.")),
            rng.choice(("Queen spotted." if queen else "No sign of the queen.", f"Queen seen: {'yes' if queen else 'no'}.")),
            rng.choice((f"{brood} frames of brood.", f"Brood on {brood} frame{'' if brood == 1 else 's'}.")),
            rng.choice((f"Bees were {temper}.", f"Temperament {temper}.")),
            f"Gave {given}." if given else "No treatment given.",
        ]
        if weight is not None:
            parts.append(f"Hive weighed {weight} kg.")
        rng.shuffle(parts)
    answer: dict[str, Any] = {"hive_id": hive, "apiary": apiary, "date": iso, "inspector": inspector, "queen_seen": queen,
                              "brood_frames": brood, "temperament": temper}  # fmt: skip
    if weight is not None:
        answer["weight_kg"] = weight
    answer["treatments"] = treatments
    return {"prompt": f"{HIVE_ASK}\n\n{' '.join(parts)}", "schema": HIVE_SCHEMA, "answer": answer, "max_tokens": 256, "tags": ["hives", language]}


# ---------------------------------------------------------------------------------------------------- telescope
SCOPES = ("refractor", "reflector", "catadioptric")
TARGETS = ("M31", "M42", "M13", "M57", "NGC 7000", "Jupiter", "Saturn", "the Moon", "Albireo", "M45", "NGC 869", "Mars")
TELESCOPE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "observer": {"type": "string"},
        "started_at": {"type": "string", "format": "date-time"},
        "site": {"type": "object", "properties": {"name": {"type": "string"}, "bortle": {"type": "integer", "minimum": 1, "maximum": 9}},
                 "required": ["name", "bortle"], "additionalProperties": False},
        "telescope": {"type": "object", "properties": {"kind": {"enum": list(SCOPES)}, "aperture_mm": {"type": "integer", "minimum": 20}},
                      "required": ["kind", "aperture_mm"], "additionalProperties": False},
        "seeing": {"type": "integer", "minimum": 1, "maximum": 5},
        "cloud_cover_pct": {"type": "integer", "minimum": 0, "maximum": 100},
        "targets": {"type": "array", "minItems": 1, "items": {
            "type": "object", "properties": {"name": {"type": "string"}, "magnification": {"type": "integer", "minimum": 1},
                                             "rating": {"type": "integer", "minimum": 1, "maximum": 5}},
            "required": ["name", "magnification", "rating"], "additionalProperties": False}},
    },
    "required": ["observer", "started_at", "site", "telescope", "seeing", "targets"],
    "additionalProperties": False,
}  # fmt: skip
TELESCOPE_ASK = ("Convert this observing log to JSON: observer, started_at (YYYY-MM-DDTHH:MM:00Z), site (name, bortle), "
                 "telescope (kind, aperture_mm), seeing (1-5), cloud_cover_pct if noted, targets (name, magnification, rating 1-5).")  # fmt: skip


def telescope_line(rng: random.Random) -> dict[str, Any]:
    iso, year, month, day = _date(rng)
    hour, minute = rng.choice((19, 20, 21, 22, 23, 0, 1, 2)), rng.choice((0, 10, 20, 30, 40, 50))
    observer = rng.choice(PEOPLE)
    site, bortle = f"{rng.choice(TOWNS)} {rng.choice(('Common', 'Downs', 'Observatory', 'Ridge'))}", rng.randint(1, 9)
    kind, aperture = rng.choice(SCOPES), rng.choice((70, 80, 102, 127, 150, 200, 254, 300))
    seeing = rng.randint(1, 5)
    clouds = rng.choice((0, 5, 10, 20, 40, 60)) if rng.random() < 0.5 else None
    targets = [{"name": t, "magnification": rng.choice((25, 40, 60, 100, 150, 200)), "rating": rng.randint(1, 5)} for t in rng.sample(TARGETS, rng.randint(1, 4))]
    language = rng.choice(("en", "en", "en", "es"))
    when = f"{_written_date(rng, language, year, month, day)} {hour:02d}:{minute:02d} UTC"
    observed = "; ".join(f"{t['name']} at {t['magnification']}x, {t['rating']}/5" for t in targets)
    if language == "es":
        parts = [f"Observador: {observer}. Inicio {when} en {site} (Bortle {bortle}).",
                 f"Telescopio {kind} de {aperture} mm, seeing {seeing}/5."]  # fmt: skip
        if clouds is not None:
            parts.append(f"Nubes {clouds} %.")
        parts.append(f"Objetos: {observed}.")
    else:
        parts = [
            rng.choice((f"Observer {observer}.", f"Log of {observer}.")),
            rng.choice((f"Started {when} at {site}, Bortle {bortle}.", f"Session at {site} (Bortle class {bortle}) from {when}.")),
            rng.choice((f"{aperture} mm {kind}.", f"Scope: {kind}, {aperture} mm aperture.")),
            rng.choice((f"Seeing {seeing}/5.", f"Seeing rated {seeing} of 5.")),
        ]
        if clouds is not None:
            parts.append(f"Cloud cover {clouds}%.")
        rng.shuffle(parts)
        parts.append(f"Observed: {observed}.")
    answer: dict[str, Any] = {"observer": observer, "started_at": f"{iso}T{hour:02d}:{minute:02d}:00Z", "site": {"name": site, "bortle": bortle},
                              "telescope": {"kind": kind, "aperture_mm": aperture}, "seeing": seeing}  # fmt: skip
    if clouds is not None:
        answer["cloud_cover_pct"] = clouds
    answer["targets"] = targets
    return {"prompt": f"{TELESCOPE_ASK}\n\n{' '.join(parts)}", "schema": TELESCOPE_SCHEMA, "answer": answer, "max_tokens": 320, "tags": ["telescope", language]}


# ---------------------------------------------------------------------------------------------------- sightings
SPECIES = ("grey heron", "common kingfisher", "red kite", "barn owl", "great crested grebe", "eurasian wren",
           "mute swan", "little egret", "common buzzard", "european robin", "song thrush", "northern lapwing")  # fmt: skip
BEHAVIOURS = ("feeding", "flying", "perched", "nesting", "singing")
SITES = ("Marsh Lane hide", "Willow Pond", "Old Quarry", "Heath Ridge", "Estuary Wall", "Beech Wood", "Reed Bed North")
SIGHTING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "observer": {"type": "string"},
        "date": {"type": "string", "format": "date"},
        "location": {"type": "object", "properties": {"site": {"type": "string"}, "town": {"type": "string"}},
                     "required": ["site", "town"], "additionalProperties": False},
        "duration_minutes": {"type": "integer", "minimum": 1},
        "good_visibility": {"type": "boolean"},
        "species": {"type": "array", "minItems": 1, "items": {
            "type": "object", "properties": {"name": {"type": "string"}, "count": {"type": "integer", "minimum": 1},
                                             "behaviour": {"enum": list(BEHAVIOURS)}},
            "required": ["name", "count", "behaviour"], "additionalProperties": False}},
        "notes": {"type": "string"},
    },
    "required": ["observer", "date", "location", "duration_minutes", "good_visibility", "species"],
    "additionalProperties": False,
}  # fmt: skip
SIGHTING_ASK = ("Log this birdwatching note as JSON: observer, date (YYYY-MM-DD), location (site, town), "
                "duration_minutes, good_visibility, species (name, count, behaviour), notes only if the note has any.")  # fmt: skip
NOTES = ("ringed individual seen", "first of the season", "juveniles present", "disturbed by dogs", "photographed")


def sighting_line(rng: random.Random) -> dict[str, Any]:
    iso, year, month, day = _date(rng)
    observer, site, town = rng.choice(PEOPLE), rng.choice(SITES), rng.choice(TOWNS)
    minutes = rng.choice((20, 30, 45, 60, 75, 90, 120, 150))
    visibility = rng.random() < 0.7
    species = [{"name": name, "count": rng.randint(1, 12), "behaviour": rng.choice(BEHAVIOURS)} for name in rng.sample(SPECIES, rng.randint(1, 4))]
    notes = rng.choice(NOTES) if rng.random() < 0.4 else None
    when = _written_date(rng, "en", year, month, day)
    duration = rng.choice((f"{minutes} minutes", f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"))
    seen = "; ".join(f"{s['count']} {s['name']} {s['behaviour']}" for s in species)
    parts = [
        rng.choice((f"Observer: {observer}.", f"Logged by {observer}.")),
        rng.choice((f"{when}, {site} near {town}, {duration}.", f"At {site} ({town}) on {when} for {duration}.")),
        "Visibility good." if visibility else rng.choice(("Poor visibility.", "Visibility was bad (mist).")),
        f"Seen: {seen}.",
    ]
    rng.shuffle(parts[:3])
    if notes is not None:
        parts.append(f"Note: {notes}.")
    answer: dict[str, Any] = {"observer": observer, "date": iso, "location": {"site": site, "town": town},
                              "duration_minutes": minutes, "good_visibility": visibility, "species": species}  # fmt: skip
    if notes is not None:
        answer["notes"] = notes
    return {"prompt": f"{SIGHTING_ASK}\n\n{' '.join(parts)}", "schema": SIGHTING_SCHEMA, "answer": answer, "max_tokens": 320, "tags": ["sightings", "en"]}


DATASETS: dict[str, Callable[[random.Random], dict[str, Any]]] = {"hives": hive_line, "telescope": telescope_line, "sightings": sighting_line}


def lines(name: str, count: int = LINES, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(f"{name}-{seed}")
    return [DATASETS[name](rng) for _ in range(count)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m models.heldout", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=COMMITTED, help="folder for NAME.jsonl (default: %(default)s)")
    parser.add_argument("--count", type=int, default=LINES, help="lines per dataset (default: %(default)s)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in DATASETS:
        path = args.out / f"{name}.jsonl"
        path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines(name, args.count)), encoding="utf-8")
        print(f"{args.count} lines -> {path}")


if __name__ == "__main__":
    main()
