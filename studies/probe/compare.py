"""Answers of two servers to the same prompts at one concurrency, prompt by prompt: how many are equal.

    .venv/bin/python studies/probe/compare.py PORT_A PORT_B CONCURRENCY

The example dataset (json_schema, 40 prompts), order_extraction (json_object, 40) and freeform_qa (text, 24), at
temperature 0 and max_tokens 256. A probe (e.g. vLLM's asynchronous path against the synchronous one, README);
the lossless figures come from `python -m studies.equality`.
"""

import sys
from concurrent.futures import ThreadPoolExecutor

from dspark_bench.loadtests.openai_api import RequestSettings, ask
from dspark_bench.scenarios import Mode, Split, load_scenario

WORKLOADS = (("examples/requests.jsonl", "json_schema", 40), ("order_extraction", "json_object", 40), ("freeform_qa", "text", 24))


def answers(port: int, samples: list, mode: str, concurrency: int) -> list[str]:
    def one(sample) -> str:
        answer = ask(f"http://127.0.0.1:{port}", RequestSettings("m", Mode(mode), max_tokens=256), sample)
        return answer["choices"][0]["message"]["content"]

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, samples))


def main() -> None:
    port_a, port_b, concurrency = (int(arg) for arg in sys.argv[1:4])
    for scenario, mode, count in WORKLOADS:
        samples = list(load_scenario(scenario).samples(Split.EVAL, count))
        first, second = (answers(port, samples, mode, concurrency) for port in (port_a, port_b))
        equal = sum(a == b for a, b in zip(first, second, strict=True))
        print(f"{scenario} {mode} concurrency {concurrency}: {equal} of {count} equal", flush=True)


if __name__ == "__main__":
    main()
