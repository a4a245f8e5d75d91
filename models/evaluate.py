"""Quality of the embedded models, measured through a real vLLM server -> models/<name>/EVAL.md.

    python -m models.evaluate [--models tiny-json tiny-json-draft] [--count 200] [--datasets FILE.jsonl ...]
    python -m models.evaluate --models /tmp/out/tiny-json --count 0 --compact-json   # a trained candidate, datasets only

Temperature 0, held-out seeds (the eval split), JSON asked for in the prompt only (no
``response_format``): what a stock server does with the model. For the draft model it also reports
how often its greedy next token equals the main model's along the main model's own answers.

The main model also answers the held-out extraction datasets (``examples/heldout/``: domains no training
source has) in json_schema mode, each line's own schema and max_tokens: the share of schema-valid answers,
of answers cut at max_tokens, and the field accuracy against each line's answer (an answer that is not
valid scores 0), what a team sees when it points the harness at its own file. And, without a server, how often
the model goes on with the right token after stray whitespace between two JSON tokens, which the server's
default grammar allows and a model trained on compact JSON may loop in.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dspark_bench.loadtests.config import load_config
from dspark_bench.loadtests.deploy.base import Endpoint, ServerSpec
from dspark_bench.loadtests.deploy.local import LocalDeployer, cpu_server_env
from dspark_bench.loadtests.deploy.servers import common_server_args, vllm_launcher
from dspark_bench.loadtests.machine import machine_facts
from dspark_bench.loadtests.openai_api import RequestSettings, ask
from dspark_bench.loadtests.validate import Verdict, validate
from dspark_bench.scenarios import Mode, Sample, Scenario, Split, builtin_names, load_scenario
from models import heldout
from models.corpus import MIX

MODELS_DIR = Path(__file__).parent
HELDOUT = [heldout.COMMITTED / f"{name}.jsonl" for name in sorted(heldout.DATASETS)]
# JSON without whitespace between tokens, as the models were trained to write it: where the grammar allows
# whitespace, a small model can spend its answer on it (stock vLLM's option; xgrammar is one backend that has it).
COMPACT_JSON_ARGS = ["--structured-outputs-config", json.dumps({"backend": "xgrammar", "disable_any_whitespace": True})]
MAKE_EVAL = "`make eval` (`python -m models.evaluate`)"  # how EVAL.md says it was made, when no arguments were given
PROBE_LINES = 30  # lines of each dataset the whitespace probe asks the model about (``after_stray_whitespace``)
ANSWER_TIMEOUT_S = 300.0  # non-streaming: the whole answer at once, several requests in flight
ORDER_FIELDS = {
    "order_id": lambda v: v.get("order_id"),
    "user.name": lambda v: (v.get("user") or {}).get("name"),
    "user.address": lambda v: (v.get("user") or {}).get("address"),
    "items": lambda v: v.get("items"),
    "total": lambda v: v.get("total"),
}


def trained_scenarios() -> list[Scenario]:
    """The built-in scenarios the models were trained on (multi-turn agent sessions are not)."""
    return [load_scenario(name) for name in MIX if name in builtin_names()]


def _ask(endpoint: Endpoint, sample: Sample, mode: Mode = Mode.PROMPT) -> tuple[str, str | None]:
    choice = ask(endpoint.base_url, RequestSettings(endpoint.model, mode, request_timeout_s=ANSWER_TIMEOUT_S), sample)["choices"][0]
    return choice["message"]["content"], choice["finish_reason"]


def _ask_all(endpoint: Endpoint, samples: list[Sample], concurrency: int, mode: Mode = Mode.PROMPT) -> list[tuple[str, str | None]]:
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(lambda s: _ask(endpoint, s, mode), samples))


def score_dataset(samples: list[Sample], answers: list[tuple[str, str | None]]) -> dict[str, Any]:
    """One dataset's answers (text, finish_reason) against its lines: shares of schema-valid answers and of
    answers cut at max_tokens, field accuracy averaged over every line (0 where the answer is not valid, so a
    model cannot score by answering few), exact matches, and the first two answers that were not valid."""
    checks = [
        validate(text, is_json=True, schema=sample.schema, truth=sample.answer, finish_reason=finish)
        for sample, (text, finish) in zip(samples, answers, strict=True)
    ]
    count = max(1, len(samples))
    return {
        "count": len(samples),
        "schema_valid": sum(c.verdict is Verdict.VALID for c in checks) / count,
        "cut": sum(finish == "length" for _, finish in answers) / count,
        "field_accuracy": sum(c.field_accuracy or 0.0 for c in checks if c.verdict is Verdict.VALID) / count,
        "exact": sum(bool(c.exact_match) for c in checks) / count,
        "failures": [
            f"{c.verdict.value}: {text[:160]!r}"
            for c, (text, _) in zip(checks, answers, strict=True)
            if c.verdict is not Verdict.VALID
        ][:2],
    }


def evaluate_datasets(endpoint: Endpoint, paths: list[Path], concurrency: int) -> dict[str, Any]:
    """Each dataset's lines once, in json_schema mode with each line's schema and max_tokens."""
    report: dict[str, Any] = {}
    for path in paths:
        scenario = load_scenario(str(path))
        samples = list(scenario.samples(Split.EVAL, scenario.distinct_prompts))
        answers = _ask_all(endpoint, samples, concurrency, Mode.JSON_SCHEMA)
        report[path.stem] = entry = score_dataset(samples, answers)
        print(f"  {path.name}: {json.dumps({k: v for k, v in entry.items() if k != 'failures'})}", flush=True)
    return report


def evaluate_model(endpoint: Endpoint, count: int, concurrency: int) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for scenario in trained_scenarios():
        samples = list(scenario.samples(Split.EVAL, count))
        answers = _ask_all(endpoint, samples, concurrency)
        parsed = valid = exact = 0
        overlap: list[float] = []
        fields = dict.fromkeys(ORDER_FIELDS, 0)
        failures: list[str] = []
        for sample, (text, finish) in zip(samples, answers, strict=True):
            check = validate(text, is_json=scenario.is_json, schema=sample.schema, truth=sample.answer, finish_reason=finish)
            if not scenario.is_json:
                overlap.append(check.field_accuracy or 0.0)
                exact += bool(check.exact_match)
                continue
            parsed += check.verdict in (Verdict.VALID, Verdict.SCHEMA_VIOLATION)
            valid += check.verdict is Verdict.VALID
            exact += bool(check.exact_match)
            if check.verdict is not Verdict.VALID and len(failures) < 3:
                failures.append(f"{check.verdict.value}: {text[:160]!r}")
            if scenario.name == "order_extraction" and check.verdict in (Verdict.VALID, Verdict.SCHEMA_VIOLATION):
                value = json.loads(text)
                if isinstance(value, dict):
                    for name, get in ORDER_FIELDS.items():
                        fields[name] += get(value) == get(sample.answer)
        entry: dict[str, Any] = {"count": count, "exact": exact / count}
        if scenario.is_json:
            entry.update(parse=parsed / count, schema_valid=valid / count, failures=failures)
            if scenario.name == "order_extraction":
                entry["fields"] = {name: hits / count for name, hits in fields.items()}
        else:
            entry.update(overlap=sum(overlap) / count, json_like=sum(a[0].lstrip().startswith("{") for a in answers) / count)
        report[scenario.name] = entry
        print(f"  {scenario.name}: {json.dumps({k: v for k, v in entry.items() if k != 'failures'})}", flush=True)
    return report


def _model(model_dir: Path):
    """The model of ``model_dir`` in float32 for the CPU, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


def _load(model_dir: Path):
    """The tokenizer and the model of ``model_dir``."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir)), _model(model_dir)


def next_token_agreement(main_dir: Path, draft_dir: Path, per_scenario: int) -> dict[str, float]:
    """Share of completion positions where the draft's greedy token equals the main model's, along the
    main model's own greedy answers (teacher-forced, transformers on the CPU)."""
    import torch

    tok, main = _load(main_dir)
    draft = _model(draft_dir)  # a drafter's folder may hold no tokenizer
    out: dict[str, float] = {}
    for scenario in trained_scenarios():
        same = total = 0
        for sample in scenario.samples(Split.EVAL, per_scenario):
            prompt = tok.apply_chat_template(sample.messages, tokenize=False, add_generation_prompt=True)
            ids = torch.tensor([tok.encode(prompt, add_special_tokens=False)])
            with torch.no_grad():
                answer = main.generate(
                    ids, max_new_tokens=400, do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
                )
                start = ids.shape[1] - 1
                main_next = main(answer).logits[0, start:-1].argmax(-1)
                draft_next = draft(answer).logits[0, start:-1].argmax(-1)
            same += int((main_next == draft_next).sum())
            total += main_next.numel()
        out[scenario.name] = same / max(1, total)
    return out


def after_stray_whitespace(model_dir: Path, paths: list[Path], per_dataset: int = PROBE_LINES, seed: int = 0) -> dict[str, float]:
    """How often the model's greedy next token is the reference answer's, teacher-forced at a random point
    between two JSON tokens of it (``corpus.whitespace_cuts``): as written, and after a space or a newline
    there, which xgrammar's default grammar lets through where it refuses the token the model wanted (a
    model that has not learned to go on after it loops in whitespace: #53). transformers on the CPU."""
    import random

    import torch

    from models.corpus import whitespace_cuts
    from models.records import compact

    tok, model = _load(model_dir)
    backend, rng = tok.backend_tokenizer, random.Random(seed)
    variants = {"as written": "", "after a space": " ", "after a newline": "\n"}
    right, count = dict.fromkeys(variants, 0), 0
    for path in paths:
        scenario = load_scenario(str(path))
        for sample in scenario.samples(Split.EVAL, min(per_dataset, scenario.distinct_prompts)):
            answer = backend.encode(compact(sample.answer), add_special_tokens=False)
            cuts = whitespace_cuts(compact(sample.answer), answer.offsets)
            if not cuts:
                continue
            k = rng.choice(cuts)
            prompt = tok.apply_chat_template(sample.messages, tokenize=False, add_generation_prompt=True)
            start = backend.encode(prompt, add_special_tokens=False).ids + answer.ids[:k]
            for name, space in variants.items():
                ids = start + (backend.encode(space, add_special_tokens=False).ids if space else [])
                with torch.no_grad():
                    right[name] += int(model(torch.tensor([ids])).logits[0, -1].argmax()) == answer.ids[k]
            count += 1
    return {name: hits / max(1, count) for name, hits in right.items()}


def write_eval_md(
    model_dir: Path,
    report: dict[str, Any],
    extra: dict[str, float] | None,
    wall_s: float,
    argv: list[str],
    datasets: dict[str, Any] | None = None,
    command: str = MAKE_EVAL,
    whitespace: dict[str, float] | None = None,
) -> None:
    count = next(iter(report.values()))["count"] if report else 0
    lines = [
        f"# Evaluation: {model_dir.name}",
        "",
        f"Reproduce: {command}. Real vLLM CPU server on {machine_facts().summary}, temperature 0. "
        + (
            f"{count} held-out prompts per scenario (eval split), JSON asked for in the prompt only (no response_format). "
            if report
            else "The scenarios were not run (--count 0). "
        )
        + f"Wall time {wall_s / 60:.1f} min.",
        "",
        f"Server: `{' '.join(argv)}`",
    ]
    if report:
        lines += ["", "| scenario | parses as JSON | schema-valid | exact match | other |", "|---|---:|---:|---:|---|"]
    for name, entry in report.items():
        if "parse" in entry:
            other = ", ".join(f"{k} {v:.1%}" for k, v in entry.get("fields", {}).items())
            lines.append(f"| {name} | {entry['parse']:.1%} | {entry['schema_valid']:.1%} | {entry['exact']:.1%} | {other} |")
        else:
            lines.append(
                f"| {name} | (text) | | {entry['exact']:.1%} | word overlap {entry['overlap']:.1%}, "
                f"answers starting with '{{' {entry['json_like']:.1%} |"
            )
    if extra:
        lines += ["", "Greedy next-token agreement with the main model (along the main model's answers):", ""]
        lines += [f"- {name}: {share:.1%}" for name, share in extra.items()]
    if datasets:
        lines += [
            "",
            "Held-out extraction datasets (`examples/heldout/`, domains no training source has; `models/heldout.py`), "
            "json_schema mode with each line's schema and max_tokens, every line once, temperature 0. Field accuracy: "
            "the share of the answer's leaves reproduced exactly, averaged over all lines (0 for an answer that is not "
            "valid). Targets (#53): >= 85% valid, <= 5% cut, >= 70% field accuracy.",
            "",
            "| dataset | lines | schema-valid | cut at max_tokens | field accuracy | exact match |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, entry in datasets.items():
            lines.append(
                f"| {name} | {entry['count']} | {entry['schema_valid']:.1%} | {entry['cut']:.1%} | "
                f"{entry['field_accuracy']:.1%} | {entry['exact']:.1%} |"
            )
    if whitespace:
        lines += [
            "",
            "The reference answer's next token, teacher-forced at a random point between two of its JSON tokens "
            f"({PROBE_LINES} lines of each dataset; transformers on the CPU): "
            + ", ".join(f"{share:.0%} {name}" for name, share in whitespace.items())
            + " there (the whitespace xgrammar's default grammar allows; `models.corpus.constrained_variant`).",
        ]
    failures = [(n, f) for n, e in {**report, **(datasets or {})}.items() for f in e.get("failures", [])]
    if failures:
        lines += ["", "Examples of invalid answers:", ""] + [f"- {n}: `{f}`" for n, f in failures]
    (model_dir / "EVAL.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m models.evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models", nargs="+", default=["tiny-json", "tiny-json-draft"],
        help="names under models/, or model folders (a trained candidate); EVAL.md is written into each",
    )  # fmt: skip
    parser.add_argument("--count", type=int, default=200, help="held-out prompts per scenario (0: skip the scenarios)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--agreement-samples", type=int, default=40, help="per scenario, for the draft's agreement")
    parser.add_argument(
        "--datasets", nargs="*", type=Path, default=HELDOUT, metavar="FILE",
        help="extraction datasets the main model answers in json_schema mode (default: examples/heldout/*.jsonl; none: skip)",
    )  # fmt: skip
    parser.add_argument("--compact-json", action="store_true", help="serve JSON without whitespace (the datasets' json_schema answers)")
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    deployer = LocalDeployer(Path("runs") / "eval-logs")
    try:
        for name in args.models:
            model_dir = Path(name) if "/" in name else MODELS_DIR / name
            name = model_dir.name
            server_args = common_server_args(load_config()) + (COMPACT_JSON_ARGS if args.compact_json else [])
            spec = ServerSpec(name, str(model_dir), name, vllm_launcher(), server_args, env=cpu_server_env())
            print(f"{name}: starting vLLM ...", flush=True)
            endpoint = deployer.start(spec)
            t0 = time.time()
            report = evaluate_model(endpoint, args.count, args.concurrency) if args.count else {}
            datasets = None if name.endswith("-draft") else evaluate_datasets(endpoint, args.datasets, args.concurrency)
            wall = time.time() - t0
            deployer.stop(endpoint)
            extra = whitespace = None
            if name.endswith("-draft"):
                extra = next_token_agreement(model_dir.parent / name.removesuffix("-draft"), model_dir, args.agreement_samples)
            elif args.datasets:
                whitespace = after_stray_whitespace(model_dir, args.datasets)
                print(f"  after stray whitespace: {json.dumps(whitespace)}", flush=True)
            command = f"`python -m models.evaluate {' '.join(given)}`" if given else MAKE_EVAL
            write_eval_md(model_dir, report, extra, wall, endpoint.argv, datasets, command, whitespace)
            print(f"{name}: wrote {model_dir / 'EVAL.md'}", flush=True)
    finally:
        deployer.stop_all()


if __name__ == "__main__":
    main()
