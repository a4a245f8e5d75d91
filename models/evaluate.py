"""Quality of the embedded models, measured through a real vLLM server -> models/<name>/EVAL.md.

    python -m models.evaluate [--models tiny-json tiny-json-draft] [--count 200]

Temperature 0, held-out seeds (the eval split), JSON asked for in the prompt only (no
``response_format``): what a stock server does with the model. For the draft model it also reports
how often its greedy next token equals the main model's along the main model's own answers.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dspark_bench.loadtests.config import load_config
from dspark_bench.loadtests.deploy.base import Endpoint, ServerSpec
from dspark_bench.loadtests.deploy.local import LocalDeployer, cpu_server_env
from dspark_bench.loadtests.deploy.servers import common_server_args, vllm_launcher
from dspark_bench.loadtests.openai_api import RequestSettings, ask
from dspark_bench.loadtests.validate import Verdict, validate
from dspark_bench.scenarios import Mode, Sample, Scenario, Split, builtin_names, load_scenario
from models.corpus import MIX

MODELS_DIR = Path(__file__).parent
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


def _ask(endpoint: Endpoint, sample: Sample) -> tuple[str, str | None]:
    choice = ask(endpoint.base_url, RequestSettings(endpoint.model, Mode.PROMPT, request_timeout_s=ANSWER_TIMEOUT_S), sample)["choices"][0]
    return choice["message"]["content"], choice["finish_reason"]


def evaluate_model(endpoint: Endpoint, count: int, concurrency: int) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for scenario in trained_scenarios():
        samples = list(scenario.samples(Split.EVAL, count))
        with ThreadPoolExecutor(concurrency) as pool:
            answers = list(pool.map(lambda s: _ask(endpoint, s), samples))
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


def next_token_agreement(main_dir: Path, draft_dir: Path, per_scenario: int) -> dict[str, float]:
    """Share of completion positions where the draft's greedy token equals the main model's, along the
    main model's own greedy answers (teacher-forced, transformers on the CPU)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(main_dir))
    main = AutoModelForCausalLM.from_pretrained(str(main_dir), dtype=torch.float32).eval()
    draft = AutoModelForCausalLM.from_pretrained(str(draft_dir), dtype=torch.float32).eval()
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


def write_eval_md(
    model_dir: Path, report: dict[str, Any], extra: dict[str, float] | None, wall_s: float, argv: list[str]
) -> None:
    lines = [
        f"# Evaluation: {model_dir.name}",
        "",
        "Reproduce: `make eval` (`python -m models.evaluate`). Real vLLM CPU server, temperature 0, "
        f"{next(iter(report.values()))['count']} held-out prompts per scenario (eval split), JSON asked for in the prompt "
        f"only (no response_format). Wall time {wall_s / 60:.1f} min.",
        "",
        f"Server: `{' '.join(argv)}`",
        "",
        "| scenario | parses as JSON | schema-valid | exact match | other |",
        "|---|---:|---:|---:|---|",
    ]
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
    failures = [(n, f) for n, e in report.items() for f in e.get("failures", [])]
    if failures:
        lines += ["", "Examples of invalid answers:", ""] + [f"- {n}: `{f}`" for n, f in failures]
    (model_dir / "EVAL.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m models.evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["tiny-json", "tiny-json-draft"])
    parser.add_argument("--count", type=int, default=200, help="held-out prompts per scenario")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--agreement-samples", type=int, default=40, help="per scenario, for the draft's agreement")
    args = parser.parse_args(argv)
    deployer = LocalDeployer(Path("runs") / "eval-logs")
    try:
        for name in args.models:
            model_dir = MODELS_DIR / name
            spec = ServerSpec(name, str(model_dir), name, vllm_launcher(), common_server_args(load_config()), env=cpu_server_env())
            print(f"{name}: starting vLLM ...", flush=True)
            endpoint = deployer.start(spec)
            t0 = time.time()
            report = evaluate_model(endpoint, args.count, args.concurrency)
            wall = time.time() - t0
            deployer.stop(endpoint)
            extra = None
            if name.endswith("-draft"):
                extra = next_token_agreement(MODELS_DIR / name.removesuffix("-draft"), model_dir, args.agreement_samples)
            write_eval_md(model_dir, report, extra, wall, endpoint.argv)
            print(f"{name}: wrote {model_dir / 'EVAL.md'}", flush=True)
    finally:
        deployer.stop_all()


if __name__ == "__main__":
    main()
