"""``dspark-bench bench|report|gate|ui``: deploy the arms, sweep concurrency, validate, report, gate.

Exit status: 0 done (gate: passed); 1 the run stopped early (partial results kept, marked
incomplete) or the gate failed; 2 bad configuration or input (nothing was started); 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from datetime import datetime
from pathlib import Path

import locust  # noqa: F401  - early: gevent patches sockets before anything opens one
import numpy as np

from dspark_bench.loadtests.arms import REFERENCE_ARM
from dspark_bench.loadtests.config import ConfigError, RunConfig, add_setting_flags, flag_overrides, load_config, placement_line
from dspark_bench.loadtests.deploy.base import DeployError, signals_to_main_greenlet
from dspark_bench.loadtests.records import records_path
from dspark_bench.loadtests.results import ResultsError, RunResults, load_results, results_from_records
from dspark_bench.loadtests.sweep import RunAborted, run_sweep
from dspark_bench.reports import render_html
from dspark_bench.reports.article import load_records
from dspark_bench.reports.compare import build_comparison
from dspark_bench.reports.gate import (
    Check,
    GateError,
    Thresholds,
    evaluate,
    format_checks,
    load_thresholds,
    only_measurement_failed,
    write_checks,
)
from dspark_bench.reports.history import HISTORY_RUNS, MIN_HISTORY, format_history, history_panel, run_ratios, standings
from dspark_bench.reports.html import render_comparison
from dspark_bench.reports.tables import (
    agreement_lines,
    capacity_lines,
    engine_lines,
    format_summary,
    session_lines,
    summary_frame,
    warning_lines,
)
from dspark_bench.store import STORE_ENV, STORE_FILE, RunStore, StoreError, runs_in, safe_url, store_url


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
    bench.add_argument("--config", help="run configuration YAML (see dspark_bench/loadtests/configs/); flags override it")
    add_setting_flags(bench, "bench")
    _add_store_flag(bench)
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
    ui.add_argument("--config", help="run configuration YAML; every setting the web UI can honour is honoured")
    ui.add_argument("--arm", default="dspark", help="the arm to serve (default dspark)")
    ui.add_argument("--web-port", type=int, default=8089, help="Locust web UI port (default 8089)")
    add_setting_flags(ui, "ui")
    _add_store_flag(ui)
    gate = sub.add_parser(
        "gate",
        help="check a run against a thresholds file; exit 1 when a check fails",
        description="Runs the thresholds file's short sweep (bench_config), or reads --run, then checks speed-ups, "
        "invalid rates and P95 against the committed reference run, and prints a pass/fail table.",
    )
    gate.add_argument("--thresholds", default="benchmarks/gate/thresholds.yaml", help="thresholds YAML")
    gate.add_argument("--run", dest="run_dir", help="a saved run folder to check instead of running a sweep")
    gate.add_argument("--out", dest="output_dir", default="runs", help="parent folder of the sweep's run folder")
    gate.add_argument(
        "--against",
        choices=["thresholds", "history"],
        default="thresholds",
        help="where speed-up limits come from: the thresholds file, or the store's last complete runs on this "
        f"machine kind (their median less their spread; the file's limits while it has fewer than {MIN_HISTORY})",
    )
    gate.add_argument("--history-runs", type=int, default=HISTORY_RUNS, help=f"runs of history to use (default {HISTORY_RUNS})")
    gate.add_argument(
        "--retries",
        type=int,
        default=1,
        help="sweeps run again, each in a run folder of its own, when one fails only because some levels were not "
        "measured cleanly (a starved load generator, another process on the CPU): the machine, not the patch; a "
        "failing speed, acceptance or invalid-rate check is never retried (default 1; 0: never)",
    )
    _add_store_flag(gate)
    history = sub.add_parser(
        "history",
        help="runs in the store and their ratios to the reference arm, grouped by machine kind",
        description="Every recorded run (bench, gate, ui, imported) with each arm's effective-throughput ratio to "
        f"{REFERENCE_ARM} per scenario and level, oldest first, one block per machine kind.",
    )
    history.add_argument("--machine", help="only machine kinds containing this text (e.g. 'EPYC', 'amx')")
    history.add_argument("--arm", help="only this arm")
    history.add_argument("--scenario", help="only this scenario")
    history.add_argument("--level", type=float, help="only this level")
    history.add_argument("--last", type=int, help="only the latest N runs")
    _add_store_flag(history)
    store = sub.add_parser("store", help="the run store: import run folders made before it, or elsewhere")
    store_sub = store.add_subparsers(dest="store_command", required=True)
    store_import = store_sub.add_parser(
        "import", help="record run folders (or every run under a folder, e.g. benchmarks/); a run already there is skipped"
    )
    store_import.add_argument("paths", nargs="+", metavar="PATH")
    _add_store_flag(store_import)
    return parser


def _add_store_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        help=f"run store: sqlite:///FILE or postgresql://user@host/db (default ${STORE_ENV}, else {STORE_FILE} in the runs folder)",
    )


def cmd_bench(args: argparse.Namespace) -> int:
    return execute(load_config(args.config, **flag_overrides(args)), args.store)[0]


def execute(config: RunConfig, store: str | None = None, source: str = "bench") -> tuple[int, Path]:
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
    _report(run_dir, store_url(store, config.output_dir), source)
    return status, run_dir


def cmd_ui(args: argparse.Namespace) -> int:
    from dspark_bench.loadtests.ui import ignored_by_ui, run_ui

    config = load_config(args.config, **{**flag_overrides(args), "arms": args.arm})
    if ignored := ignored_by_ui(config):
        print(f"note: the web UI sets users and spawn rate itself; ignored: {', '.join(ignored)}", flush=True)
    signals_to_main_greenlet()
    status, run_dir, arms = run_ui(config, args.arm, args.web_port)
    results_from_records(run_dir, config, arms).write()
    _report(run_dir, store_url(args.store, config.output_dir), "ui")
    return 0 if status in (0, 1) else status  # Locust exits 1 when any answer failed validation


def cmd_gate(args: argparse.Namespace) -> int:
    thresholds = load_thresholds(args.thresholds)
    reference = None
    if thresholds.max_p95_regression is not None:
        if thresholds.reference_run is None or not thresholds.reference_run.exists():
            raise GateError(f"reference_run {thresholds.reference_run} not found; fix: commit one, or drop max_p95_regression")
        reference = load_results(thresholds.reference_run)
    if args.run_dir:
        run_dir = Path(args.run_dir)
        if not (run_dir / "results.json").exists():
            raise ConfigError(f"{run_dir} has no results.json; give a run folder made by 'bench'")
        return _gate_run(run_dir, thresholds, reference, args)[0]
    if thresholds.bench_config is None:
        raise GateError(f"{args.thresholds} has no bench_config; fix: add one, or pass --run RUN_DIR")
    if args.retries < 0:
        raise ConfigError(f"--retries {args.retries}: give 0 or more")
    for attempt in range(args.retries + 1):
        name = datetime.now().strftime("gate-%Y%m%d-%H%M%S")
        status, run_dir = execute(
            load_config(thresholds.bench_config, output_dir=args.output_dir, run_name=name), args.store, "gate"
        )
        if status:
            print("gate: FAILED (the sweep did not finish)", file=sys.stderr)
            return status
        verdict, checks = _gate_run(run_dir, thresholds, reference, args)
        if verdict == 0 or attempt == args.retries or not only_measurement_failed(checks):
            return verdict
        unclean = sum(not check.passed for check in checks)
        print(f"gate: {unclean} level(s) of {run_dir.name} not measured cleanly, every other check passed: the machine "
              f"disturbed the sweep; sweeping once more ({attempt + 1} of {args.retries} retries)", file=sys.stderr)  # fmt: skip
    raise AssertionError("unreachable")


def _gate_run(
    run_dir: Path, thresholds: Thresholds, reference: RunResults | None, args: argparse.Namespace
) -> tuple[int, list[Check]]:
    """Check one run folder; print the table and save it as gate.json. Returns the exit status and the checks."""
    results = load_results(run_dir)
    history = None
    if args.against == "history":
        url = store_url(args.store, args.output_dir)
        with RunStore(url) as store:
            history = store.machine_history(results, args.history_runs)
        print(f"gate: limits from {runs_in(history)} earlier complete run(s) of {results.machine.kind} in {safe_url(url)}")
    checks = evaluate(results, thresholds, reference, history)
    print("\n" + format_checks(checks))
    write_checks(run_dir, checks)
    return (0 if checks and all(c.passed for c in checks) else 1), checks


def _report(run_dir: Path, store: str | None = None, source: str = "bench") -> None:
    """Print the summary, write the page and, with a ``store``, set the run against its history there and
    record it. A store that fails costs the run nothing: one warning says how to record it later. A run cut
    short has levels with no requests: their empty means are the report's to mark, not numpy's to warn about."""
    if not (run_dir / "results.json").exists():
        return
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        _write_report(run_dir, store, source)


def _write_report(run_dir: Path, store: str | None, source: str) -> None:
    results = load_results(run_dir)
    print(f"\nmachine: {results.machine.summary}")
    if placement := placement_line(results.config):
        print(placement)
    for line in engine_lines(results):
        print(line)
    comparison = build_comparison(results, load_records(run_dir))
    summary = summary_frame(results, comparison=comparison)
    (run_dir / "summary.txt").write_text(format_summary(summary) + "\n", encoding="utf-8")
    print(format_summary(summary, compact=True))
    if results.config.cost_only:
        print(f"(cost-only: a {results.config.model_shape}-shaped model with vLLM's dummy weights, answers are noise; x ref: raw "
              f"output tok/s over {REFERENCE_ARM}'s, paired by repeat; every column: {run_dir / 'summary.txt'})")
    else:
        print(f"(x ref: effective tok/s over {REFERENCE_ARM}'s, paired by repeat; x finished: the same over answers that ended "
              f"on their own in both arms; every column: {run_dir / 'summary.txt'})")
    for line in [*agreement_lines(comparison, results.config.temperature), *warning_lines(comparison), *session_lines(results),
                 *capacity_lines(results)]:  # fmt: skip
        print(line)
    panel: list[str] = []
    if store is not None:
        try:
            with RunStore(store) as opened:
                earlier = opened.machine_history(results, HISTORY_RUNS)
                ratios = run_ratios(results)
                panel = history_panel(results.machine.kind, standings(ratios, earlier))
                added = opened.record(results, ratios, source)
            print(
                f"\nstore: {'recorded in' if added else 'already in'} {safe_url(store)} ({runs_in(earlier)} earlier run(s) of this machine kind)"
            )
        except StoreError as exc:
            print(
                f"warning: {exc}; the run is complete in {run_dir}; record it later with: "
                f"dspark-bench store import {run_dir} --store URL",
                file=sys.stderr,
            )
    try:
        page = render_html(results, run_dir / "report.html", panel)
    except Exception as exc:  # noqa: BLE001 - a report bug must not hide the run's outcome or lose data
        print(f"warning: the HTML report failed ({type(exc).__name__}: {exc}); results are in {run_dir}", file=sys.stderr)
        return
    print(f"\nreport: {page}\nrecords: {run_dir / 'requests.jsonl'}  responses: {run_dir / 'responses'}/<arm>/*.json")


def cmd_history(args: argparse.Namespace) -> int:
    with RunStore(store_url(args.store)) as store:
        rows = store.history(machine=args.machine, arm=args.arm, scenario=args.scenario, level=args.level, last_runs=args.last)
        print(f"store: {safe_url(store.url)}, {store.run_count()} run(s)")
    print(format_history(rows))
    return 0


def cmd_store_import(args: argparse.Namespace) -> int:
    """Every results.json under the paths; runs already there and files that are no run's are said and skipped."""
    found: list[Path] = []
    for given in args.paths:
        path = Path(given)
        if path.is_file() and path.name == "results.json":
            found.append(path)
        elif (path / "results.json").is_file():
            found.append(path / "results.json")
        elif path.is_dir():
            found += sorted(path.rglob("results.json"))
        else:
            raise ConfigError(f"{path}: neither a run folder nor a folder holding runs; give run folders or e.g. benchmarks/")
    added = present = skipped = 0
    with RunStore(store_url(args.store)) as store:
        for path in found:
            try:
                results = load_results(path)
            except ResultsError as exc:
                print(f"skipped {exc}")
                skipped += 1
                continue
            if store.record(results, run_ratios(results), "import"):
                added += 1
            else:
                present += 1
        print(
            f"store: {safe_url(store.url)}: {added} run(s) imported, {present} already there, {skipped} skipped; {store.run_count()} in all"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "bench":
            return cmd_bench(args)
        if args.command == "gate":
            return cmd_gate(args)
        if args.command == "ui":
            return cmd_ui(args)
        if args.command == "history":
            return cmd_history(args)
        if args.command == "store":
            return cmd_store_import(args)
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
    except (ConfigError, GateError, ResultsError, StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
