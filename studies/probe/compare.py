"""The same requests to several running servers, one server after another: tokens per second, the
DSpark counters of each (``/dspark/status``: grammar drafts verified and landed, engine and drafter
steps), and whether every server's answers equal the first's.

    .venv/bin/python studies/probe/compare.py PORTS N CONCURRENCY [SCENARIO] [MODE]

PORTS: comma-separated (the first is the reference, e.g. stock vLLM from ``serve.sh`` without
``--dspark-enabled``); SCENARIO: a builtin name or a dataset file (default examples/requests.jsonl);
MODE: json_schema (default), json_object or text. Temperature 0, each request's own max_tokens (else
512). A probe, not the harness: no validation, no records.
"""

import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from dspark_bench.loadtests.openai_api import MAX_TOKENS, ask
from dspark_bench.scenarios import Split, load_scenario

COUNTS = ("grammar_draft_tokens", "grammar_drafts_accepted", "engine_steps", "drafter_steps")


def main() -> None:
    ports = [int(p) for p in sys.argv[1].split(",")]
    count, concurrency = int(sys.argv[2]), int(sys.argv[3])
    scenario = sys.argv[4] if len(sys.argv) > 4 else "examples/requests.jsonl"
    mode = sys.argv[5] if len(sys.argv) > 5 else "json_schema"
    samples = list(load_scenario(scenario).samples(Split.EVAL, count))
    answers = {}
    for port in ports:
        base = f"http://127.0.0.1:{port}"

        def one(sample, base=base):
            reply = ask(base, "m", sample.messages, response_format=sample.response_format(mode),
                        max_tokens=sample.max_tokens or MAX_TOKENS, timeout_s=600)  # fmt: skip
            return reply["choices"][0]["message"]["content"], reply["usage"]["completion_tokens"]

        started = time.time()
        with ThreadPoolExecutor(concurrency) as pool:
            replies = list(pool.map(one, samples))
        took = time.time() - started
        tokens = sum(r[1] for r in replies)
        answers[port] = [r[0] for r in replies]
        try:
            status = httpx.get(f"{base}/dspark/status", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            status = {}  # stock vLLM: no such endpoint
        counts = ", ".join(f"{k} {status[k]}" for k in COUNTS if k in status)
        print(f"{port}: {tokens} tokens in {took:.1f} s = {tokens / took:.1f} tok/s{'; ' + counts if counts else ''}")
    first = answers[ports[0]]
    for port in ports[1:]:
        differ = [i for i, (a, b) in enumerate(zip(first, answers[port], strict=True)) if a != b]
        print(f"{port}: {count - len(differ)} of {count} answers equal {ports[0]}'s")


if __name__ == "__main__":
    main()
