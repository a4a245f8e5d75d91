"""Closed-loop, non-streaming load on one server: N requests of a scenario at a fixed concurrency.

    .venv/bin/python benchmarks/dspark/probe/load.py PORT N CONCURRENCY [FORMAT] [SCENARIO]

FORMAT: json_object (default), json_schema, text or none; SCENARIO: order_extraction (default).
Prints completion tokens per second and milliseconds per request. A probe, not the harness: no
validation, no records (use `python -m loadtests bench` for numbers that go into RESULTS).
"""

import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from dspark_bench.scenarios import Split, load_scenario


def main() -> None:
    port, count, concurrency = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    mode = sys.argv[4] if len(sys.argv) > 4 else "json_object"
    samples = list(load_scenario(sys.argv[5] if len(sys.argv) > 5 else "order_extraction").samples(Split.EVAL, count))

    def ask(sample) -> int:
        body = {"model": "m", "messages": sample.messages, "max_tokens": 512, "temperature": 0}
        if mode != "none":
            body["response_format"] = sample.response_format(mode)
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=300).json()
        return answer["usage"]["completion_tokens"]

    started = time.time()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(ask, samples))
    took = time.time() - started
    print(
        f"{count} req conc {concurrency}: {tokens} tokens in {took:.2f}s = {tokens / took:.1f} tok/s, {took / count * 1000:.0f} ms/req"
    )


if __name__ == "__main__":
    main()
