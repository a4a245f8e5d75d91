"""Training text: the scenarios' train split, made-up records and JSONSchemaBench documents (``records``), and
made-up extraction into schemas of many shapes (``extraction``)."""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

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
    tok = load_tokenizer(tokenizer_dir)
    eos = tok.convert_tokens_to_ids(tok.eos_token)
    pairs = _pairs_for(tuple(pair_job))  # type: ignore[arg-type]
    # The prompt exactly as vLLM renders it (chat template, generation prompt), tokenised apart from the
    # completion, so training sees the same token boundary that serving does.
    prompts = [tok.apply_chat_template(p.messages, tokenize=False, add_generation_prompt=True) for p in pairs]
    backend = tok.backend_tokenizer
    prompt_ids = backend.encode_batch(prompts, add_special_tokens=False)
    answer_ids = backend.encode_batch([p.completion for p in pairs], add_special_tokens=False)
    return [(p.ids, a.ids + [eos]) for p, a in zip(prompt_ids, answer_ids, strict=True)]


def tokenized_pairs(
    total: int, tokenizer_dir: str, workers: int = 1, chunk: int = 5000, schema_pairs: str = str(DEFAULT_SCHEMA_PAIRS)
) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids + EOS) for ``total`` training pairs."""
    return _run(_tokenized_for, [(*job, tokenizer_dir) for job in _jobs(total, chunk, schema_pairs)], workers)
