"""Our validator against real-world schemas nobody here wrote: the JSONSchemaBench corpus's labels.

A vendored sample (tests/data/jsonschemabench_sample.jsonl: 320 labeled documents, over half of them
under schemas that use ``format``) runs on every clone; the whole corpus runs where ../shared has it.
"""

import json
from pathlib import Path

import pytest

from dspark_bench.loadtests.validate import Verdict, validate

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "jsonschemabench_sample.jsonl"
CORPUS = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "jsonschemabench"
AGREEMENT = 0.999


def _agreement(cases) -> tuple[float, int, list[str]]:
    agree, total, misses = 0, 0, []
    for where, schema, case in cases:
        verdict = validate(json.dumps(case["data"]), is_json=True, schema=schema, truth=None).verdict
        assert verdict in (Verdict.VALID, Verdict.SCHEMA_VIOLATION)
        if (verdict is Verdict.VALID) == case["valid"]:
            agree += 1
        else:
            misses.append(where)
        total += 1
    return agree / total, total, misses


def _sample_cases():
    for line in SAMPLE.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        yield f"{row['source']}#{row['index']}", row["schema"], row


def test_verdicts_agree_with_the_vendored_labels():
    share, total, misses = _agreement(_sample_cases())
    assert total == 320
    assert share >= AGREEMENT, misses[:10]


def test_format_keywords_are_checked():
    """Without the format checkers (jsonschema's format-nongpl extra) these pass as valid."""
    schema = {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"}, "site": {"format": "uri"}}}
    assert validate('{"when": "yesterday"}', is_json=True, schema=schema, truth=None).verdict is Verdict.SCHEMA_VIOLATION
    assert validate('{"site": "not a uri"}', is_json=True, schema=schema, truth=None).verdict is Verdict.SCHEMA_VIOLATION
    assert validate('{"when": "2026-11-30T04:05:06Z", "site": "https://x.y/z"}', is_json=True, schema=schema, truth=None).verdict is Verdict.VALID


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the whole JSONSchemaBench corpus is in ../shared only")
def test_verdicts_agree_with_the_whole_corpus():
    def cases():
        for path in sorted(CORPUS.glob("*/*.json")):
            entry = json.loads(path.read_text(encoding="utf-8"))
            for index, case in enumerate(entry.get("tests", [])):
                yield f"{path.relative_to(CORPUS)}#{index}", entry["schema"], case

    share, total, misses = _agreement(cases())
    assert total > 10_000
    assert share >= AGREEMENT, misses[:10]
