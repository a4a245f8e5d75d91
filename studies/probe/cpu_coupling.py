"""Does load on one CPU slow a server pinned to the other? Stock vLLM on CPU 0, this client on CPU 1; 8 trials of
32 requests at 1 user, every other one with a process spinning on CPU 1. Prints each trial's tok/s and the
server's own mean inter-token latency (its /metrics).

    .venv/bin/python -m studies.probe.cpu_coupling

Run on an otherwise idle 2-core machine (benchmarks/crosscheck/RESULTS.md, session 9).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import locust  # noqa: F401  - gevent patches sockets first

from dspark_bench.loadtests.deploy.local import LocalDeployer
from dspark_bench.loadtests.metrics import level_metrics
from dspark_bench.loadtests.openai_api import RequestSettings
from dspark_bench.loadtests.plan import LevelPlan
from dspark_bench.loadtests.records import RunFolderSink
from dspark_bench.loadtests.sweep import run_level
from dspark_bench.scenarios import Mode, Split, load_scenario
from studies.crosscheck import server_itl, stock_server


def main() -> None:
    os.sched_setaffinity(0, {1})
    out = Path(os.environ.get("OUT", "/tmp/cpu-coupling"))
    out.mkdir(parents=True, exist_ok=True)
    samples = list(load_scenario("order_extraction").samples(Split.EVAL, 32))
    dep = LocalDeployer(out / "logs")
    spec = stock_server("0")
    try:
        ep = dep.start(spec)
        for trial in range(8):
            spin = trial % 2 == 1
            proc = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c", "while True: pass"]) if spin else None
            time.sleep(0.5)
            before = server_itl(ep.base_url)
            sink = RunFolderSink(out / f"t{trial}")
            plan = LevelPlan("baseline", 1, RequestSettings(ep.model, Mode.PROMPT), samples, sink, 32, warmup=0)
            run_level(ep, plan, 600)
            after = server_itl(ep.base_url)
            if proc:
                proc.kill()
                proc.wait()
            sink.close()
            m = level_metrics(plan.records)
            print(
                json.dumps(
                    {
                        "trial": trial,
                        "spin": spin,
                        "tok_s": round(m.raw_tok_s, 1),
                        "server_itl_ms": round(1000 * (after[0] - before[0]) / (after[1] - before[1]), 3),
                    }
                ),
                flush=True,
            )
    finally:
        dep.stop_all()


if __name__ == "__main__":
    main()
