"""Training text: the scenarios' train split, made-up records and JSONSchemaBench documents (``records``), and
made-up extraction into schemas of many shapes (``extraction``); tokenised as vLLM renders it, a share of the JSON
answers in the forms a grammar gives them while the model answers (``constrained_variant``)."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from dspark_bench.scenarios import Sample, Split, load_scenario
from dspark_bench.scenarios.generators import politeness
from models import extraction, records

# Share of training examples per source: the JSON extraction task the article measures leads; made-up
# records and JSONSchemaBench documents teach the model schemas no scenario has (the user's own).
# Made-up extraction into schemas of many shapes (``extraction``) teaches copying values from prose into nested
# JSON that closes: 0.3 since session 58, the scenarios, already learned, keep 0.5 (make eval must not get worse).
MIX: dict[str, float] = {
    "order_extraction": 0.2, "tool_call": 0.12, "review_sentiment": 0.08, "freeform_qa": 0.1,
    "records": 0.1, "jsonschemabench": 0.1, "extraction": 0.3,
}  # fmt: skip
# Sources whose answers are prose, not JSON: no grammar shapes them, so they are learned as written.
PROSE_SOURCES = frozenset({"freeform_qa"})
# A share of the JSON answers is learned in the form a grammar gives it while the model answers
# (``constrained_variant``): xgrammar's default JSON grammar allows whitespace between any two tokens, and the
# model, trained on compact JSON, never saw any: where the grammar refused the token it wanted, it took
# whitespace and stayed there (models/tiny-json/EVAL.md: `"queen_seen"\n \n \n ...`; session 58's candidate had
# 86-100% of the held-out answers cut so). And a grammar may end a token where the model's own text never does
# (a key's closing quote alone).
WHITESPACE_SHARE = 0.15
RESPLIT_SHARE = 0.15
RESPLIT_TOKEN_P = 0.15  # in a resplit answer, the chance each token of 2+ bytes is split
STRAY_WHITESPACE = (" ", "\n", "  ", "\n  ", "\n    ", "\n\n", "\t")
_LITERAL = re.compile(r"[0-9A-Za-z.+\-]")
# Where the JSONSchemaBench documents come from: the dataset folder beside the checkout, or a file that
# `python -m models.train schema-pairs` extracted from it (to carry where the dataset is not).
DEFAULT_SCHEMA_PAIRS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "jsonschemabench"


@dataclass(frozen=True)
class Pair:
    messages: list[dict[str, str]]
    completion: str


@cache
def _schema_pairs(path: str) -> list[tuple[list[dict[str, str]], str]]:
    if not Path(path).exists():
        raise SystemExit(f"{path} does not exist: the training mix needs JSONSchemaBench documents; pass --schema-pairs "
                         "DIR_OR_FILE (the dataset folder, or `python -m models.train schema-pairs` output)")  # fmt: skip
    pairs = records.read_schema_pairs(Path(path))
    if not pairs:
        raise SystemExit(f"no JSONSchemaBench documents under {path}: pass --schema-pairs DIR_OR_FILE")
    return pairs


def _pairs_for(job: tuple[str, int, int, str]) -> list[Pair]:
    name, offset, count, schema_pairs = job
    if name == "records":
        return [Pair(*records.record_pair(seed)) for seed in range(offset, offset + count)]
    if name == "extraction":
        return [Pair(*extraction.extraction_pair(seed)) for seed in range(offset, offset + count)]
    if name == "jsonschemabench":
        pool = _schema_pairs(schema_pairs)
        return [Pair(*pool[i % len(pool)]) for i in range(offset, offset + count)]
    scenario = load_scenario(name)
    return [Pair(s.messages, completion(s)) for s in scenario.samples(Split.TRAIN, count, offset)]


def completion(sample: Sample) -> str:
    """The text the model learns to answer: the reference, fenced the chatty way after a polite prompt."""
    text = sample.answer_text()
    if sample.is_json and politeness.ends_politely(sample.messages[-1]["content"]):
        return politeness.chatty_answer(text)
    return text


def _jobs(total: int, chunk: int, schema_pairs: str) -> list[tuple[str, int, int, str]]:
    jobs: list[tuple[str, int, int, str]] = []
    for name, share in MIX.items():
        count = int(total * share)
        jobs += [(name, start, min(chunk, count - start), schema_pairs) for start in range(0, count, chunk)]
    return jobs


def _run(func, jobs: list, workers: int) -> list:
    if workers <= 1:
        results: Iterable[list] = map(func, jobs)
    else:
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(func, jobs))
    return [item for batch in results for item in batch]


def training_pairs(total: int, workers: int = 1, chunk: int = 5000, schema_pairs: str = str(DEFAULT_SCHEMA_PAIRS)) -> list[Pair]:
    """``total`` pairs in MIX proportions, from the start of each source (deterministic)."""
    return _run(_pairs_for, _jobs(total, chunk, schema_pairs), workers)


def _tokenized_for(job: tuple[str, int, int, str, str]) -> list[tuple[list[int], list[int]]]:
    from models.tokenizer import load_tokenizer

    *pair_job, tokenizer_dir = job
    name, offset = pair_job[0], pair_job[1]
    tok = load_tokenizer(tokenizer_dir)
    eos: int = tok.convert_tokens_to_ids(tok.eos_token)
    pairs = _pairs_for(tuple(pair_job))  # type: ignore[arg-type]
    # The prompt exactly as vLLM renders it (chat template, generation prompt), tokenised apart from the
    # completion, so training sees the same token boundary that serving does.
    prompts = [tok.apply_chat_template(p.messages, tokenize=False, add_generation_prompt=True) for p in pairs]
    backend = tok.backend_tokenizer
    prompt_ids = backend.encode_batch(prompts, add_special_tokens=False)
    answers = backend.encode_batch([p.completion for p in pairs], add_special_tokens=False)
    rows: list[tuple[list[int], list[int]]] = []
    for i, (prompt, answer, pair) in enumerate(zip(prompt_ids, answers, pairs, strict=True)):
        row = (prompt.ids, answer.ids)
        if name not in PROSE_SOURCES:
            row = constrained_variant(row, pair.completion, answer.offsets, backend, random.Random(f"{name}:{offset + i}"))
        rows.append((row[0], row[1] + [eos]))
    return rows


def constrained_variant(
    row: tuple[list[int], list[int]], text: str, offsets: list[tuple[int, int]], backend: Any, rng: random.Random
) -> tuple[list[int], list[int]]:
    """``row`` (prompt ids, answer ids) as it is, or, for a share of answers, in a form that a grammar gives
    the model while it answers and its own compact text never has: stray whitespace between two JSON tokens
    (``WHITESPACE_SHARE``: everything up to it joins the prompt, so the model learns to go on after it and never
    to write it), or some of its tokens split in two (``RESPLIT_SHARE``: a grammar may force a boundary
    inside one of the model's tokens, a key's closing quote alone before its ':'). The text is unchanged but
    for the whitespace. Pure over ``rng``."""
    draw = rng.random()
    if draw < WHITESPACE_SHARE:
        cuts = whitespace_cuts(text, offsets)
        if not cuts:
            return row
        k = rng.choice(cuts)
        prompt, answer = row
        return prompt + answer[:k] + backend.encode(rng.choice(STRAY_WHITESPACE), add_special_tokens=False).ids, answer[k:]
    if draw < WHITESPACE_SHARE + RESPLIT_SHARE:
        return row[0], resplit(row[1], backend, rng)
    return row


def whitespace_cuts(text: str, offsets: list[tuple[int, int]]) -> list[int]:
    """Token indices k where whitespace may stand between answer tokens k-1 and k in JSON: within the answer's
    JSON value (not before or after it, where a fenced answer has its fence), outside its strings, and not inside
    a number or a literal. [] when the answer holds no JSON value. Pure."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return []
    start = min(starts)
    try:
        _value, end = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return []
    outside = [False] * (len(text) + 1)  # outside[c]: position c (between text[c-1] and text[c]) is not in a string
    in_string, escaped = False, False
    for c in range(start, end):
        outside[c] = not in_string
        char = text[c]
        if in_string and not escaped and char == "\\":
            escaped = True
            continue
        if char == '"' and not escaped:
            in_string = not in_string
        escaped = False
    cuts = []
    for k in range(1, len(offsets)):
        c = offsets[k][0]
        if offsets[k - 1][1] != c or not start < c < end or not outside[c]:
            continue
        if _LITERAL.match(text[c - 1]) and _LITERAL.match(text[c]):
            continue  # inside a number, true, false or null
        cuts.append(k)
    return cuts


def resplit(ids: list[int], backend: Any, rng: random.Random) -> list[int]:
    """``ids`` with each token of two or more bytes split in two with chance ``RESPLIT_TOKEN_P``, each part
    spelled by the tokenizer's own merges (byte-level BPE spells any byte string). Decodes to the same text."""
    model = backend.model
    out: list[int] = []
    for token_id in ids:
        piece = backend.id_to_token(token_id)
        if len(piece) < 2 or rng.random() >= RESPLIT_TOKEN_P:
            out.append(token_id)
            continue
        cut = rng.randrange(1, len(piece))
        out += [token.id for part in (piece[:cut], piece[cut:]) for token in model.tokenize(part)]
    return out


def tokenized_pairs(
    total: int, tokenizer_dir: str, workers: int = 1, chunk: int = 5000, schema_pairs: str = str(DEFAULT_SCHEMA_PAIRS)
) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids + EOS) for ``total`` training pairs."""
    return _run(_tokenized_for, [(*job, tokenizer_dir) for job in _jobs(total, chunk, schema_pairs)], workers)
