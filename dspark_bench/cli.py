"""``dspark-bench bench|report|gate|ui``: deploy the arms, sweep concurrency, validate, report, gate.

Exit status: 0 done (gate: passed); 1 the run stopped early (partial results kept, marked
incomplete) or the gate failed; 2 bad configuration or input (nothing was started); 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

import locust  # noqa: F401  - early: gevent patches sockets before anything opens one

from dspark_bench.loadtests.config import ConfigError, load_config
from dspark_bench.loadtests.deploy.base import DeployError, signals_to_main_greenlet
from dspark_bench.loadtests.machine import machine_summary
from dspark_bench.loadtests.records import records_path
from dspark_bench.loadtests.results import load_results, results_from_records
from dspark_bench.loadtests.sweep import RunAborted, run_sweep
from dspark_bench.reports import render_html
from dspark_bench.reports.gate import GateError, evaluate, format_checks, load_thresholds
from dspark_bench.reports.html import render_comparison
from dspark_bench.reports.tables import format_summary, summary_frame


def _numbers(text: str | None, flag: str, kind: type, what: str) -> list | None:
    """A comma-separated flag value as numbers of ``kind``; a ConfigError naming the flag otherwise."""
    if text is None:
        return None
    try:
        return [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: write comma-separated {what}, e.g. 1,2,4,8") from None


def _slo(text: str | None) -> dict[str, float] | None:
    """--slo ttft_ms=500,tpot_ms=50,e2e_ms=2000 (any of them)."""
    if text is None:
        return None
    slo = {}
    for pair in text.split(","):
        key, sep, value = pair.strip().partition("=")
        try:
            slo[key] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise ConfigError(f"--slo {text!r}: write NAME=MILLISECONDS pairs, e.g. ttft_ms=500,e2e_ms=2000")
    return slo


def _urls(pairs: list[str] | None) -> dict[str, str] | None:
    if not pairs:
        return None
    urls = {}
    for pair in pairs:
        arm, sep, url = pair.partition("=")
        if not sep or not url.startswith(("http://", "https://")):
            raise ConfigError(f"--url {pair!r}: write ARM=http://host:port")
        urls[arm] = url
    return urls


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dspark-bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser(
        "bench",
        help="deploy arms and run the paired concurrency sweep",
        description="Settings come from --config (YAML), then these flags. Defaults: the "
        "embedded model, order_extraction, arms baseline / baseline-constrained / dspark, "
        "levels 1..64, 200 measured requests per level (a closed-loop level runs at least 4 whole waves of its users), "
        "fresh prompts for every repeat and level, every arm's prefix cache emptied before every level.",
    )
    bench.add_argument("--config", help="run configuration YAML (see loadtests/configs/)")
    bench.add_argument("--model", help="local model directory for local arms (default models/tiny-json)")
    bench.add_argument("--scenario", dest="scenarios", help="comma-separated scenario names or YAML paths")
    bench.add_argument("--mode", help="prompt | json_object | json_schema, for arms that do not force one")
    bench.add_argument("--arms", help="comma-separated arms (baseline, baseline-constrained, dspark, or custom)")
    bench.add_argument("--levels", help="comma-separated concurrency levels, e.g. 1,2,4,8,16,32,64")
    bench.add_argument("--rate", type=float, help="open loop: send this many requests per second (instead of --levels)")
    bench.add_argument("--rates", help="open loop: sweep these rates, e.g. 1,2,4,8 (requests per second)")
    bench.add_argument("--arrival", choices=["poisson", "constant"], help="open loop: arrival process (default poisson)")
    bench.add_argument("--max-concurrency", type=int, help="open loop: cap on requests in flight (default 256)")
    bench.add_argument(
        "--workers",
        type=int,
        help="Locust worker processes that send the requests, this process their master (default 0: users run here); "
        "for when one process cannot keep up (a level flagged for low achieved concurrency or rate)",
    )
    bench.add_argument("--requests", dest="requests_per_level", type=int, help="measured requests per level (article: 200)")
    bench.add_argument("--warmup", dest="warmup_requests", type=int, help="warm-up requests per level, excluded")
    bench.add_argument("--repeats", type=int, help="run each level this many times per arm")
    bench.add_argument("--max-tokens", type=int)
    bench.add_argument("--temperature", type=float)
    bench.add_argument("--request-timeout", dest="request_timeout_s", type=float, help="seconds per request")
    bench.add_argument("--startup-timeout", dest="startup_timeout_s", type=float, help="seconds for a server to be ready")
    bench.add_argument("--level-timeout", dest="level_timeout_s", type=float, help="seconds per level and arm")
    bench.add_argument(
        "--slo",
        metavar="ttft_ms=..,tpot_ms=..,e2e_ms=..",
        help="service-level objectives: goodput counts valid answers within all of them (any subset)",
    )
    bench.add_argument("--url", action="append", metavar="ARM=URL", help="use a running server for ARM (repeatable)")
    bench.add_argument("--api-key-env", help="environment variable holding the API key for --url servers")
    bench.add_argument("--out", dest="output_dir", help="parent folder of run folders (default runs/)")
    bench.add_argument("--name", dest="run_name", help="run folder name (default: a timestamp)")
    report = sub.add_parser(
        "report", help="re-render the HTML page and summary of a saved run (or build them from a Locust run's records)"
    )
    report.add_argument("run_dir")
    report.add_argument(
        "--compare", metavar="OTHER_RUN", help="also write compare.html: RUN_DIR (before) against OTHER_RUN (after)"
    )
    ui = sub.add_parser(
        "ui",
        help="deploy one arm and open Locust's web UI on it; Ctrl-C ends it and writes the report",
        description="Users and spawn rate are set in the browser. The JSON tab shows valid answers, invalid ones "
        "by category and effective JSON tokens/s beside Locust's own statistics.",
    )
    ui.add_argument("--config", help="run configuration YAML (model, scenario, mode, arms' server args)")
    ui.add_argument("--arm", default="dspark", help="the arm to serve (default dspark)")
    ui.add_argument("--model", help="local model directory (default models/tiny-json)")
    ui.add_argument("--scenario", dest="scenarios", help="scenario name or YAML path")
    ui.add_argument("--mode", help="prompt | json_object | json_schema")
    ui.add_argument("--url", action="append", metavar="ARM=URL", help="use a running server instead of starting one")
    ui.add_argument("--api-key-env", help="environment variable holding the API key for --url servers")
    ui.add_argument("--web-port", type=int, default=8089, help="Locust web UI port (default 8089)")
    ui.add_argument("--workers", type=int, default=0, help="Locust worker processes on this machine (0: none)")
    ui.add_argument(
        "--rate", type=float, default=0.0, help="open loop: requests per second (0: closed loop); also editable in the web UI"
    )
    ui.add_argument("--arrival", choices=["poisson", "constant"], default="poisson", help="open loop: arrival process")
    ui.add_argument("--out", dest="output_dir", help="parent folder of run folders (default runs/)")
    ui.add_argument("--name", dest="run_name", help="run folder name (default: ui-<timestamp>)")
    gate = sub.add_parser(
        "gate",
        help="check a run against a thresholds file; exit 1 when a check fails",
        description="Runs the thresholds file's short sweep (bench_config), or reads --run, then checks speed-ups, "
        "invalid rates and P95 against the committed reference run, and prints a pass/fail table.",
    )
    gate.add_argument("--thresholds", default="benchmarks/gate/thresholds.yaml", help="thresholds YAML")
    gate.add_argument("--run", dest="run_dir", help="a saved run folder to check instead of running a sweep")
    gate.add_argument("--out", dest="output_dir", default="runs", help="parent folder of the sweep's run folder")
    return parser


def cmd_bench(args: argparse.Namespace) -> int:
    overrides = {
        k: getattr(args, k)
        for k in (
            "model",
            "scenarios",
            "mode",
            "arms",
            "requests_per_level",
            "warmup_requests",
            "repeats",
            "max_tokens",
            "temperature",
            "request_timeout_s",
            "startup_timeout_s",
            "level_timeout_s",
            "api_key_env",
            "output_dir",
            "run_name",
            "workers",
        )
    }
    overrides["levels"] = _numbers(args.levels, "--levels", int, "integers")
    overrides["urls"] = _urls(args.url)
    overrides["slo"] = _slo(args.slo)
    overrides["rates"] = [args.rate] if args.rate is not None else _numbers(args.rates, "--rates", float, "requests per second")
    overrides["arrival"], overrides["max_concurrency"] = args.arrival, args.max_concurrency
    return execute(load_config(args.config, **overrides))[0]


def execute(config) -> tuple[int, Path]:
    """Run one sweep to the end (or to the first fatal error / Ctrl-C), report it; (exit status, run folder)."""
    run_dir = Path(config.output_dir) / (config.run_name or datetime.now().strftime("%Y%m%d-%H%M%S"))
    if (run_dir / "requests.jsonl").exists():
        raise ConfigError(f"run folder {run_dir} already holds a run; choose another --name")
    print(f"run folder: {run_dir}", flush=True)
    status = 0
    signals_to_main_greenlet()
    try:
        run_sweep(config, run_dir)
    except (RunAborted, DeployError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        print(f"partial results kept in {run_dir} (marked incomplete)", file=sys.stderr)
        status = 1
    except KeyboardInterrupt:
        print(f"\ninterrupted; partial results kept in {run_dir} (marked incomplete)", file=sys.stderr)
        status = 130
    except SystemExit as exc:  # SIGTERM / SIGHUP: the servers are stopped, the results written
        print(f"\nterminated; partial results kept in {run_dir} (marked incomplete)", file=sys.stderr)
        status = exc.code if isinstance(exc.code, int) else 1
    _report(run_dir)
    return status, run_dir


def cmd_ui(args: argparse.Namespace) -> int:
    from dspark_bench.loadtests.ui import run_ui

    overrides = {k: getattr(args, k) for k in ("model", "scenarios", "mode", "api_key_env", "output_dir", "run_name")}
    overrides["urls"] = _urls(args.url)
    config = load_config(None if args.config is None else args.config, arms=args.arm, **overrides)
    signals_to_main_greenlet()
    if args.rate < 0:
        raise ConfigError(f"--rate {args.rate:g} is negative; fix: give requests per second, e.g. --rate 4 (0: closed loop)")
    status, run_dir, arms = run_ui(config, args.arm, args.web_port, args.workers, args.rate, args.arrival)
    results_from_records(run_dir, config, arms).write()
    _report(run_dir)
    return 0 if status in (0, 1) else status  # Locust exits 1 when any answer failed validation


def cmd_gate(args: argparse.Namespace) -> int:
    thresholds = load_thresholds(args.thresholds)
    if args.run_dir:
        run_dir = Path(args.run_dir)
        if not (run_dir / "results.json").exists():
            raise ConfigError(f"{run_dir} has no results.json; give a run folder made by 'bench'")
    else:
        if thresholds.bench_config is None:
            raise GateError(f"{args.thresholds} has no bench_config; fix: add one, or pass --run RUN_DIR")
        name = datetime.now().strftime("gate-%Y%m%d-%H%M%S")
        status, run_dir = execute(load_config(thresholds.bench_config, output_dir=args.output_dir, run_name=name))
        if status:
            print("gate: FAILED (the sweep did not finish)", file=sys.stderr)
            return status
    reference = None
    if thresholds.max_p95_regression is not None:
        if thresholds.reference_run is None or not thresholds.reference_run.exists():
            raise GateError(f"reference_run {thresholds.reference_run} not found; fix: commit one, or drop max_p95_regression")
        reference = load_results(thresholds.reference_run)
    checks = evaluate(load_results(run_dir), thresholds, reference)
    print("\n" + format_checks(checks))
    (run_dir / "gate.json").write_text(json.dumps([c.__dict__ for c in checks], indent=1), encoding="utf-8")
    return 0 if checks and all(c.passed for c in checks) else 1


def _report(run_dir: Path) -> None:
    if not (run_dir / "results.json").exists():
        return
    results = load_results(run_dir)
    print(f"\nmachine: {machine_summary(results.get('machine', {}))}")
    print(format_summary(summary_frame(results)))
    try:
        page = render_html(results, run_dir / "report.html")
    except Exception as exc:  # noqa: BLE001 - a report bug must not hide the run's outcome or lose data
        print(f"warning: the HTML report failed ({type(exc).__name__}: {exc}); results are in {run_dir}", file=sys.stderr)
        return
    print(f"\nreport: {page}\nrecords: {run_dir / 'requests.jsonl'}  responses: {run_dir / 'responses'}/<arm>/*.json")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "bench":
            return cmd_bench(args)
        if args.command == "gate":
            return cmd_gate(args)
        if args.command == "ui":
            return cmd_ui(args)
        run_dir = Path(args.run_dir)
        if not (run_dir / "results.json").exists():
            if records_path(run_dir) is None:
                raise ConfigError(f"{run_dir} has neither results.json nor requests.jsonl; give a run folder")
            results_from_records(run_dir, load_config(), {}).write()  # a Locust-only run (web UI, master/worker)
        _report(run_dir)
        if args.compare:
            other = Path(args.compare)
            if not (other / "results.json").exists():
                raise ConfigError(f"--compare {other}: no results.json there; give a run folder made by 'bench'")
            page = render_comparison(
                load_results(run_dir), load_results(other), (run_dir.name, other.name), run_dir / "compare.html"
            )
            print(f"comparison: {page}")
        return 0
    except (ConfigError, GateError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
