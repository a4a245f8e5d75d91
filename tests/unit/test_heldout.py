"""The held-out extraction datasets (models/heldout.py): domains the embedded model's training never saw.

What the model's targets are measured on must be loadable by the harness as committed, regenerated the same,
and absent from every training source: otherwise "schemas it never saw" would not hold.
"""

import json

import pytest

from dspark_bench.scenarios import load_scenario
from models import corpus, heldout
from models.corpus import DEFAULT_SCHEMA_PAIRS as JSONSCHEMABENCH
from models.records import HELD_OUT_SUBSETS

COMMITTED = heldout.COMMITTED
# Words only the held-out domains use: none may appear in the training text.
MARKERS = ("hive", "apiary", "brood", "queen_seen", "telescope", "bortle", "magnification", "birdwatch", "sighting", "kingfisher")


@pytest.mark.parametrize("name", list(heldout.DATASETS))
def test_each_committed_dataset_is_what_the_generator_makes_and_loads_in_the_harness(name):
    path = COMMITTED / f"{name}.jsonl"
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines == heldout.lines(name), f"regenerate: python -m models.heldout --out {COMMITTED}"
    load_scenario(str(path))  # every answer meets its line's schema, or loading stops with the line's number
    assert all(line["answer"] and line["schema"] for line in lines)
    assert len({json.dumps(line["answer"], sort_keys=True) for line in lines}) == len(lines)  # no two alike
    tags = {tag for line in lines for tag in line["tags"]}
    assert name in tags


def test_optional_fields_are_sometimes_absent_and_the_values_are_in_the_prompt():
    for name in heldout.DATASETS:
        lines = heldout.lines(name)
        required = set(lines[0]["schema"]["required"])
        optional = set(lines[0]["schema"]["properties"]) - required
        assert optional and any(optional - set(line["answer"]) for line in lines), name
        assert any(optional & set(line["answer"]) for line in lines), name
        properties = lines[0]["schema"]["properties"]
        copied = [key for key, spec in properties.items() if spec.get("type") == "string" and "format" not in spec]
        for line in lines:  # names and ids are copied, not invented (enums and dates are normalised)
            assert all(line["answer"][key] in line["prompt"] for key in copied if key in line["answer"]), (name, line["answer"])


def test_no_training_source_mentions_a_held_out_domain():
    samples = [(name, 0, 400, "") for name in corpus.MIX if name != "jsonschemabench"]
    text = " ".join(
        " ".join(m["content"] for m in pair.messages) + pair.completion for job in samples for pair in corpus._pairs_for(job)
    ).lower()
    assert len(text) > 100_000
    assert [marker for marker in MARKERS if marker in text] == []


@pytest.mark.skipif(not JSONSCHEMABENCH.is_dir(), reason="JSONSchemaBench is read from ../shared")
def test_no_jsonschemabench_training_document_mentions_a_held_out_domain():
    found = [
        path.name
        for path in JSONSCHEMABENCH.glob("*/*.json")
        if path.parent.name not in HELD_OUT_SUBSETS
        and any(word in path.read_text(encoding="utf-8", errors="replace").lower() for word in ("beekeep", "apiary", "telescope", "birdwatch"))
    ]
    assert found == []


def test_the_evaluation_scores_valid_cut_and_field_accuracy_over_every_line():
    """models.evaluate's held-out score: an answer cut at max_tokens counts as cut and not valid, and a line
    whose answer is not valid scores 0 field accuracy (the mean is over every line, not over the valid ones)."""
    from dspark_bench.loadtests.validate import field_accuracy
    from dspark_bench.scenarios import Split
    from models.evaluate import score_dataset

    samples = list(load_scenario(str(COMMITTED / "hives.jsonl")).samples(Split.EVAL, 3))
    right = json.dumps(samples[0].answer)
    half = dict(samples[1].answer, hive_id="nope", apiary="nope", date="1999-01-01", inspector="nope")
    answers = [(right, "stop"), (json.dumps(half), "stop"), (json.dumps(samples[2].answer)[:40], "length")]
    score = score_dataset(samples, answers)
    assert score["count"] == 3
    assert score["schema_valid"] == pytest.approx(2 / 3)
    assert score["cut"] == pytest.approx(1 / 3)
    part = field_accuracy(half, samples[1].answer)
    assert 0 < part < 1
    assert score["field_accuracy"] == pytest.approx((1 + part + 0) / 3)  # line 3, cut, scores 0
    assert score["exact"] == pytest.approx(1 / 3)
    assert score["failures"] and score["failures"][0].startswith("truncated")


def test_eval_md_reports_the_datasets_and_the_command_that_made_it(tmp_path):
    """A candidate evaluated on the datasets alone (--count 0) gets EVAL.md with the datasets' table, the
    targets beside it, and the command that reproduces it, not make eval's."""
    from models.evaluate import write_eval_md

    entry = {"count": 100, "schema_valid": 0.96, "cut": 0.04, "field_accuracy": 0.22, "exact": 0.0, "failures": ["truncated: '{'"]}
    write_eval_md(tmp_path, {}, None, 120.0, ["vllm", "serve"], {"hives": entry}, "`python -m models.evaluate --count 0`")
    text = (tmp_path / "EVAL.md").read_text()
    assert "| hives | 100 | 96.0% | 4.0% | 22.0% | 0.0% |" in text
    assert "Reproduce: `python -m models.evaluate --count 0`" in text and "not run (--count 0)" in text
    assert ">= 85% valid" in text and "- hives: `truncated: '{'`" in text
    assert "| scenario |" not in text


def test_the_whitespace_probe_asks_the_model_after_a_space_and_a_newline_between_json_tokens(tmp_path):
    """The teacher-forced probe of what the model does after stray whitespace: a share for each variant, the same
    twice (its cuts are seeded), and a line of EVAL.md."""
    from models.evaluate import HELDOUT, MODELS_DIR, after_stray_whitespace, write_eval_md

    shares = after_stray_whitespace(MODELS_DIR / "tiny-json", HELDOUT[:1], per_dataset=4)
    assert list(shares) == ["as written", "after a space", "after a newline"]
    assert all(0 <= share <= 1 for share in shares.values()) and shares == after_stray_whitespace(MODELS_DIR / "tiny-json", HELDOUT[:1], per_dataset=4)
    write_eval_md(tmp_path, {}, None, 60.0, ["vllm"], None, whitespace={"as written": 0.25, "after a space": 0.05, "after a newline": 0.0})
    assert "25% as written, 5% after a space, 0% after a newline there" in (tmp_path / "EVAL.md").read_text()
