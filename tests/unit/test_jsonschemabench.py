"""Our validator against real-world schemas nobody here wrote (skipped when the corpus is absent)."""

import json
import random
from pathlib import Path

import pytest

from dspark_bench.loadtests.validate import Verdict, validate

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "jsonschemabench"


@pytest.mark.skipif(not CORPUS.is_dir(), reason="JSONSchemaBench corpus not present in ../shared")
def test_verdicts_agree_with_the_corpus_labels():
    files = sorted(CORPUS.glob("*/*.json"))
    random.Random(0).shuffle(files)
    agree = total = 0
    for path in files[:600]:
        entry = json.loads(path.read_text(encoding="utf-8"))
        for case in entry.get("tests", []):
            verdict = validate(json.dumps(case["data"]), is_json=True, schema=entry["schema"], truth=None).verdict
            assert verdict in (Verdict.VALID, Verdict.SCHEMA_VIOLATION)
            agree += (verdict is Verdict.VALID) == case["valid"]
            total += 1
    assert total > 500
    # The misses are formats the corpus asserts that jsonschema's optional format checkers skip.
    assert agree / total >= 0.97
