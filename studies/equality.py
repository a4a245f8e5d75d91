"""Is DSpark lossless? Answers of the patched server against stock vLLM's, token for token.

    python -m studies.equality [--prompts 100] [--arms dspark,dspark-structure] [--concurrency 1,8,64]
        [--mode json_object|json_schema] [--out benchmarks/dspark/equality]

Stock vLLM and each DSpark drafter run side by side on the embedded model; every scenario's first
``--prompts`` held-out prompts go to each server ``--concurrency`` at a time (temperature 0, the same
``response_format``: ``--mode`` for JSON scenarios, ``text`` for free text). A scenario may be a dataset
file (``examples/requests.jsonl``: each line's own schema and max_tokens). Stock answers carry
their top-2 log-probabilities, so where an answer differs, the first differing token's top-2 gap on the
stock server tells a floating-point near-tie (two tokens almost equally likely; batched verification
rounds differently) from a real fault (a drafting or grammar error would differ where the model
was sure). Writes results.json and RESULTS.md.

Two ways of asking (``--requests``): ``explicit``, the same ``response_format`` on both servers, and
``default``, the patched server's request without one (JSON scenarios only), so the patch's default
``--response-format json`` path is held to the same answers as stock vLLM asked for ``json_object``.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from dspark_bench.loadtests.arms import BUILTIN_ARMS
from dspark_bench.loadtests.config import DEFAULT_MODEL, load_config
from dspark_bench.loadtests.deploy.base import Endpoint, ServerSpec
from dspark_bench.loadtests.deploy.local import LocalDeployer, cpu_server_env
from dspark_bench.loadtests.deploy.servers import common_server_args, dspark_launcher, vllm_launcher
from dspark_bench.loadtests.machine import machine_facts
from dspark_bench.loadtests.openai_api import RequestSettings, ask
from dspark_bench.loadtests.server_metrics import delta, scrape
from dspark_bench.scenarios import Mode, Split, load_scenario

# the builtin dspark arm's flags, so this checks exactly what the benchmark runs
DSPARK_FLAGS = list(BUILTIN_ARMS["dspark"].server_args)
ARMS = {"dspark": DSPARK_FLAGS, "dspark-structure": [*DSPARK_FLAGS, "--dspark-drafter", "structure"]}
SCENARIOS = ("order_extraction", "review_sentiment", "tool_call", "freeform_qa")
# Below this top-2 gap (nats) two tokens are a near-tie: bf16 logits of a 13-position verification pass
# and of a one-token step differ by about this much.
NEAR_TIE_NATS = 0.1
ANSWER_TIMEOUT_S = 600.0  # non-streaming, with log-probs: a whole answer at once on a busy machine


@dataclass(frozen=True)
class Difference:
    scenario: str
    request_id: str
    position: int  # index of the first differing token in the stock answer
    stock_token: str
    stock_top2: list[tuple[str, float]]  # the stock server's two most likely tokens there, with log-probs
    gap_nats: float
    patched_text: str  # the patched answer from the first difference on (clipped)
    stock_text: str


def _bytes(logprob: dict) -> bytes:
    """A log-prob entry's token as bytes (its ``bytes`` field: a token may hold part of a character)."""
    return bytes(logprob["bytes"]) if logprob.get("bytes") is not None else logprob["token"].encode()


def first_difference(stock_tokens: list[bytes], patched: bytes) -> int | None:
    """Index of the first stock token the patched answer does not continue with; None if equal.

    Bytes, not text: a token may hold part of a multi-byte character (the logprobs' ``bytes`` field).
    """
    offset = 0
    for index, token in enumerate(stock_tokens):
        if patched[offset : offset + len(token)] != token:
            return index
        offset += len(token)
    return None if offset == len(patched) else len(stock_tokens)


def parted_at(stock_tokens: list[bytes], alternatives: list[list[bytes]], patched: bytes) -> int | None:
    """Where the answers part, in stock tokens; None if equal. Usually ``first_difference``; but where the
    patched answer continues with a longer token the stock server ranked second at the token before (stock
    ``o`` then ``","``, patched ``ost`` then ``a Inc``: the same bytes up to there, split otherwise), they
    parted there, and that token's top-2 gap is the one that says whether it was a near-tie.
    ``alternatives``: per stock token, its top log-prob tokens' bytes."""
    position = first_difference(stock_tokens, patched)
    if not position:
        return position
    before = position - 1
    offset = sum(len(t) for t in stock_tokens[:before])
    chosen = stock_tokens[before]
    if any(len(other) > len(chosen) and patched.startswith(other, offset) for other in alternatives[before]):
        return before
    return position


REQUESTS = ("explicit", "default")


def compare(
    stock: Endpoint,
    patched: Endpoint,
    scenario_name: str,
    prompts: int,
    request: str = "explicit",
    concurrency: int = 1,
    mode: Mode = Mode.JSON_OBJECT,
) -> tuple[int, list[Difference]]:
    """Each server gets the prompts ``concurrency`` at a time (stock first, then the patched one), so the
    patched answers are made in batches as large as a benchmark level's."""
    scenario = load_scenario(scenario_name)
    samples = list(scenario.samples(Split.EVAL, prompts))
    modes = [mode if sample.is_json else Mode.TEXT for sample in samples]

    def stock_answer(i: int) -> dict:
        settings = RequestSettings(stock.model, modes[i], request_timeout_s=ANSWER_TIMEOUT_S)
        return ask(stock.base_url, settings, samples[i], logprobs=True, top_logprobs=2)["choices"][0]

    def patched_answer(i: int) -> str:
        patched_mode = Mode.PROMPT if request == "default" else modes[i]  # default: no response_format, the patch picks json_object
        settings = RequestSettings(patched.model, patched_mode, request_timeout_s=ANSWER_TIMEOUT_S)
        return ask(patched.base_url, settings, samples[i])["choices"][0]["message"]["content"] or ""

    with ThreadPoolExecutor(concurrency) as pool:
        references = list(pool.map(stock_answer, range(len(samples))))
        answers = list(pool.map(patched_answer, range(len(samples))))
    equal, differences = 0, []
    for sample, reference, answer in zip(samples, references, answers, strict=True):
        steps = reference["logprobs"]["content"]
        if reference["finish_reason"] == "stop" and steps and not reference["message"]["content"].endswith(steps[-1]["token"]):
            steps = steps[:-1]  # the end-of-sequence token: scored, never part of the text
        tokens = [_bytes(step) for step in steps]
        position = parted_at(tokens, [[_bytes(c) for c in step["top_logprobs"]] for step in steps], answer.encode())
        if position is None:
            equal += 1
            continue
        step = steps[min(position, len(steps) - 1)]
        top2 = [(c["token"], c["logprob"]) for c in step["top_logprobs"][:2]]
        gap = top2[0][1] - top2[1][1] if len(top2) == 2 else float("inf")
        offset = sum(len(t) for t in tokens[:position])
        clip = slice(offset, offset + 80)
        stock_text = reference["message"]["content"].encode()[clip].decode(errors="replace")
        differences.append(
            Difference(
                scenario_name,
                sample.request_id,
                position,
                step["token"],
                top2,
                round(gap, 4),
                answer.encode()[clip].decode(errors="replace"),
                stock_text,
            )  # fmt: skip
        )
    return equal, differences


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render_markdown(results: dict) -> str:
    lines = [
        "# DSpark against stock vLLM: equal answers, token for token",
        "",
        f"`{results.get('command') or 'python -m studies.equality --prompts ' + str(results['prompts'])}` on {results['machine']['cpu']} "
        f"({results['machine']['cores']} cores), git {results['machine']['git_commit']}, {results['started']}.",
        "Temperature 0, each prompt's own max_tokens (else 512), the same response_format on both servers "
        "(the row's mode for JSON scenarios, text for free text), each server asked `c` prompts at a time. A difference is a near-tie when the stock "
        f"server's top-2 log-prob gap at the first differing token is below {NEAR_TIE_NATS} nats.",
        "",
        "Request `explicit`: that response_format on both; `default`: none on the patched server (its "
        "--response-format json supplies json_object).",
        "",
        "| arm | scenario | request | mode | c | prompts | equal | equal % | differences | near-ties | largest gap (nats) | mean acceptance length | grammar drafts verified |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["rows"]:
        gaps = [d["gap_nats"] for d in row["differences"]]
        ties = sum(g < NEAR_TIE_NATS for g in gaps)
        lines.append(
            f"| {row['arm']} | {row['scenario']} | {row.get('request', 'explicit')} | {row.get('mode', 'json_object')} | "
            f"{row.get('concurrency', 1)} | {row['prompts']} | {row['equal']} | {100 * row['equal'] / row['prompts']:.1f} | "
            f"{len(gaps)} | {ties} | {max(gaps) if gaps else '-'} | {_number(row.get('mean_acceptance_length'))} | "
            f"{row.get('grammar_draft_tokens') or 0:.0f} |"
        )
    lines += ["", "## Every difference", ""]
    for row in results["rows"]:
        for d in row["differences"]:
            top2 = ", ".join(f"{json.dumps(t, ensure_ascii=False)} {lp:.4f}" for t, lp in d["stock_top2"])
            lines.append(
                f"- {row['arm']} `{d['request_id']}` token {d['position']}: stock top-2 {top2} (gap {d['gap_nats']}); "
                f"stock `{d['stock_text'][:40]!r}` vs patched `{d['patched_text'][:40]!r}`"
            )
    if not any(row["differences"] for row in results["rows"]):
        lines.append("None.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.equality", description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=100, help="held-out prompts per scenario (default 100)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"DSpark arms to compare with stock vLLM ({', '.join(ARMS)})")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="scenarios (default: all four)")
    parser.add_argument("--requests", default=",".join(REQUESTS), help="explicit (same response_format), default (none on the patched server)")
    parser.add_argument("--concurrency", default="1", help="requests in flight per server, one run each: e.g. 1,8,64 (default 1)")
    parser.add_argument("--mode", default=Mode.JSON_OBJECT.value, choices=[Mode.JSON_OBJECT.value, Mode.JSON_SCHEMA.value],
                        help="response_format of JSON scenarios (default json_object)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("benchmarks/dspark/equality"), help="where results go")
    args = parser.parse_args(argv)
    try:
        levels = [int(c) for c in args.concurrency.split(",") if c]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        parser.error(f"--concurrency {args.concurrency!r}: give whole numbers >= 1, e.g. 1,8,64")
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or args.prompts < 1:
        parser.error(f"unknown arm(s) {unknown}; use {', '.join(ARMS)}" if unknown else "--prompts must be >= 1")
    requests = [r for r in args.requests.split(",") if r]
    if bad := [r for r in requests if r not in REQUESTS]:
        parser.error(f"unknown request kind(s) {bad}; use {', '.join(REQUESTS)}")
    if "default" in requests and args.mode != Mode.JSON_OBJECT.value:
        # the patch's default is json_object: against stock asked for a schema it would differ by design
        parser.error("--requests default holds the patch's default (json_object) to stock's json_object answers; "
                     "use it with --mode json_object, or pass --requests explicit")  # fmt: skip
    scenarios = [s for s in args.scenarios.split(",") if s]
    for name in scenarios:
        load_scenario(name)  # fails early on a typo, with the known names
    args.out.mkdir(parents=True, exist_ok=True)
    common, env = common_server_args(load_config()), cpu_server_env()
    specs = [ServerSpec("stock", str(DEFAULT_MODEL), "tiny-json", vllm_launcher(), common, env=env)]
    specs += [ServerSpec(arm, str(DEFAULT_MODEL), "tiny-json", dspark_launcher(), common, ARMS[arm], env) for arm in arms]
    deployer = LocalDeployer(args.out / "logs")
    command = " ".join(["python -m studies.equality", *(argv if argv is not None else sys.argv[1:])])
    results = {"prompts": args.prompts, "command": command, "started": datetime.now(UTC).isoformat(timespec="seconds"),
               "machine": machine_facts().as_dict(), "rows": []}  # fmt: skip
    try:
        endpoints = {e.arm: e for e in deployer.start_many(specs)}
        for arm in arms:
            for scenario in scenarios:
                for request in requests:
                    if request == "default" and not load_scenario(scenario).is_json:
                        continue  # free text has no default format to check
                    for concurrency in levels:
                        before = scrape(endpoints[arm].base_url)
                        equal, differences = compare(endpoints["stock"], endpoints[arm], scenario, args.prompts, request,
                                                     concurrency, Mode(args.mode))  # fmt: skip
                        # proof the drafts were there to get wrong: vLLM's mean acceptance length over these prompts
                        counters = delta(before, scrape(endpoints[arm].base_url))
                        acceptance, grammar = counters.get("mean_acceptance_length"), counters.get("dspark_grammar_draft_tokens")
                        print(f"{arm:<18} {scenario:<18} {request:<8} c={concurrency:<3} {equal}/{args.prompts} equal, "
                              f"{len(differences)} differ, mean acceptance length {acceptance or 0:.2f}, "
                              f"grammar drafts verified {grammar or 0:.0f}", flush=True)  # fmt: skip
                        results["rows"].append({"arm": arm, "scenario": scenario, "request": request, "prompts": args.prompts,
                                                "concurrency": concurrency, "mode": args.mode, "equal": equal,
                                                "mean_acceptance_length": acceptance, "grammar_draft_tokens": grammar,
                                                "differences": [asdict(d) for d in differences]})  # fmt: skip
                        (args.out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
    finally:
        deployer.stop_all()
    (args.out / "RESULTS.md").write_text(render_markdown(results), encoding="utf-8")
    print(f"results: {args.out / 'RESULTS.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
