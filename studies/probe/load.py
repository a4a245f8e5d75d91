"""Closed-loop, non-streaming load on one server: N requests of a scenario at a fixed concurrency.

    .venv/bin/python studies/probe/load.py PORT N CONCURRENCY [FORMAT] [SCENARIO] [SKIP]

FORMAT: json_object (default), json_schema, text or none; SCENARIO: order_extraction (default); SKIP: samples
passed over first (default 0), so that a round can send prompts no earlier round sent (a cold prefix cache).
Prints completion tokens per second and milliseconds per request. A probe, not the harness: no
validation, no records (use `python -m loadtests bench` for numbers that go into RESULTS).
"""

import sys
import time
from concurrent.futures import ThreadPoolExecutor

from dspark_bench.loadtests.openai_api import RequestSettings, ask
from dspark_bench.scenarios import Mode, Split, load_scenario


def main() -> None:
    port, count, concurrency = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    mode = sys.argv[4] if len(sys.argv) > 4 else "json_object"
    skip = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    scenario = load_scenario(sys.argv[5] if len(sys.argv) > 5 else "order_extraction")
    samples = list(scenario.samples(Split.EVAL, skip + count))[skip:]

    def completion_tokens(sample) -> int:
        request = RequestSettings("m", Mode.PROMPT if mode == "none" else Mode(mode), request_timeout_s=300)
        answer = ask(f"http://127.0.0.1:{port}", request, sample)
        return answer["usage"]["completion_tokens"]

    started = time.time()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(completion_tokens, samples))
    took = time.time() - started
    print(
        f"{count} req conc {concurrency}: {tokens} tokens in {took:.2f}s = {tokens / took:.1f} tok/s, {took / count * 1000:.0f} ms/req"
    )


if __name__ == "__main__":
    main()
