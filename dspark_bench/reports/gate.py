"""CI regression gates: a run's results checked against a committed thresholds file.

A thresholds file (YAML) says, per arm and concurrency level, the smallest effective-throughput ratio
to a reference arm of the same run, the smallest mean acceptance length (the arm's drafts land: a
patch whose speculation is off fails it on any machine), the largest invalid-JSON rate, and how much
the P95 ratio to the reference arm may grow over a committed reference run's. Checks are per scenario
(arms' modes are fixed within a run). Ratios are ``compare.ratios``, the summary's: paired by repeat over
the repeats in which both levels were measurements, so the machine's speed cancels. Every check gets a
noise margin: the file's ``noise_margin``, or the reference arm's spread across repeats where that is
larger, never the spread of the arm under test (a regression that makes it erratic must not loosen its
own limit).

Speed-ups are facts about a machine: verification is nearly free on a CPU with AMX and costs almost
a decoding step per position on one with only AVX2. So ``by_cpu`` gives each CPU class
(``cpu_class``: amx, avx512, avx2) its own ``min_speedup``, and P95 is compared with the reference run
only on the CPU class it was recorded on.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dspark_bench.files import FileProblem, read_yaml_mapping
from dspark_bench.loadtests.arms import REFERENCE_ARM
from dspark_bench.loadtests.machine import MachineFacts
from dspark_bench.loadtests.results import RunResults, levels_frame, measurements
from dspark_bench.reports.compare import P95, THROUGHPUT, Key, ratios
from dspark_bench.reports.history import MIN_HISTORY, history_limit
from dspark_bench.reports.intervals import PairedRatio
from dspark_bench.store import HistoryRow

MAX_NOISE_MARGIN = 0.25  # however noisy the run, a limit never moves by more than this
MAX_STALLED = 0.1  # a level with more streams read in one piece has suspect timings
MEASUREMENT_CHECK = "level measured cleanly"  # the one check a second sweep may pass: the machine failed it
KNOWN_KEYS = {
    "bench_config",
    "reference_run",
    "against",
    "noise_margin",
    "min_speedup",
    "by_cpu",
    "min_acceptance_length",
    "max_invalid_rate",
    "max_p95_regression",
}
CPU_CLASSES = ("amx", "avx512", "avx2", "other", "unrecorded")
CHECKS_FILE = "gate.json"  # a checked run folder's checks (write_checks, load_checks)


def cpu_class(machine: MachineFacts) -> str:
    """The class of CPU a run's machine record says it ran on: what decides how cheap verification is."""
    return machine.cpu_class


class GateError(ValueError):
    """A thresholds file that cannot be used; the message names the key and the fix."""


@dataclass(frozen=True)
class Thresholds:
    against: str = REFERENCE_ARM  # speed-ups are ratios to this arm, in the same run
    noise_margin: float = 0.05  # relative slack on every check, at least
    min_speedup: dict[str, dict[int, float]] = field(default_factory=dict)  # arm -> level -> ratio
    by_cpu: dict[str, dict[str, dict[int, float]]] = field(default_factory=dict)  # CPU class -> its own min_speedup
    min_acceptance_length: dict[str, dict[int, float]] = field(default_factory=dict)  # arm -> level -> length
    max_invalid_rate: dict[str, float] = field(default_factory=dict)  # arm -> rate (0.01 = 1%)
    max_p95_regression: float | None = None  # 0.25: P95 may be 25% above the reference run's
    reference_run: Path | None = None  # results.json (or its folder) of the reference run
    bench_config: Path | None = None  # the short sweep `gate` runs when given no saved run


@dataclass(frozen=True)
class Check:
    check: str
    arm: str
    level: int | None
    measured: float
    limit: float
    passed: bool
    detail: str = ""  # why it failed, when the numbers alone do not say
    scenario: str = ""  # "" for checks over the whole run

    @property
    def lower_bound(self) -> bool:
        return self.check.startswith("speed") or self.check in ("run complete", "mean acceptance length", MEASUREMENT_CHECK)


def load_thresholds(path: str | Path) -> Thresholds:
    path = Path(path)
    if not path.is_file():
        raise GateError(f"{path}: no such thresholds file; fix: pass --thresholds FILE (see benchmarks/gate/thresholds.yaml)")
    try:
        raw = read_yaml_mapping(path, "see benchmarks/gate/thresholds.yaml")
    except FileProblem as exc:
        raise GateError(str(exc)) from None
    unknown = set(raw) - KNOWN_KEYS
    if unknown:
        raise GateError(f"{path}: unknown keys {sorted(unknown)}; fix: use {', '.join(sorted(KNOWN_KEYS))}")
    here = path.parent
    try:
        return Thresholds(
            against=str(raw.get("against", REFERENCE_ARM)),
            noise_margin=float(raw.get("noise_margin", 0.05)),
            min_speedup=_arm_levels(raw.get("min_speedup")),
            by_cpu={str(cls): _arm_levels((spec or {}).get("min_speedup")) for cls, spec in (raw.get("by_cpu") or {}).items()},
            min_acceptance_length=_arm_levels(raw.get("min_acceptance_length")),
            max_invalid_rate={str(arm): float(v) for arm, v in (raw.get("max_invalid_rate") or {}).items()},
            max_p95_regression=None if raw.get("max_p95_regression") is None else float(raw["max_p95_regression"]),
            reference_run=here / raw["reference_run"] if raw.get("reference_run") else None,
            bench_config=here / raw["bench_config"] if raw.get("bench_config") else None,
        )
    except (TypeError, ValueError, AttributeError) as exc:
        raise GateError(
            f"{path}: a value has the wrong shape ({exc}); fix: min_speedup is arm -> level -> number, "
            "max_invalid_rate is arm -> number"
        ) from None


def _arm_levels(raw: Any) -> dict[str, dict[int, float]]:
    return {str(arm): {int(level): float(v) for level, v in levels.items()} for arm, levels in (raw or {}).items()}


def _by_arm_level(results: RunResults, df: pd.DataFrame) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Per (scenario, arm, level): the median effective tok/s and P95 over repeats, the relative spread of
    effective tok/s over repeats, the worst not-valid rate, and how cleanly the level was measured. ``df``:
    the run's ``levels_frame``."""
    if df.empty:
        return {}
    out = {}
    for (scenario, arm, level), rows in df.groupby(["scenario", "arm", "level"]):
        eff = rows["effective_tok_s"]
        median = float(eff.median())
        spread = float((eff.max() - eff.min()) / median) if median and len(eff) > 1 else 0.0
        # every verdict but valid counts (http_error, timeout, truncated as much as invalid JSON)
        not_valid = 1.0 - rows["valid_rate"]
        out[(str(scenario), str(arm), int(level))] = {
            "eff": median,
            "spread": spread,
            "invalid": float(not_valid.max()),
            "p95": float(rows["latency_p95_ms"].median()),
            "problems": "; ".join(sorted({p for p in rows["problems"] if p})),
            "stalled": float(rows["stalled_stream_rate"].max()),
            "waits_measured": bool(rows["client_wait_share"].notna().all()),
            "incomplete": bool(rows["incomplete"].any()),
            "acceptance": _acceptance_length(results, str(arm), int(level)),
        }
    return out


def _margin(thresholds: Thresholds, reference_arm: dict[str, Any] | None) -> float:
    """The relative slack of a check: the file's, or the reference arm's own spread where larger, capped."""
    spread = reference_arm["spread"] if reference_arm else 0.0
    return min(MAX_NOISE_MARGIN, max(thresholds.noise_margin, spread))


def _acceptance_length(results: RunResults, arm: str, level: int) -> float:
    """Mean acceptance length over a level's repeats, from vLLM's counters (1.0: nothing drafted or landed)."""
    drafts = accepted = 0.0
    for row in results.levels:
        if row.arm == arm and int(row.level) == level:
            drafts += row.server.get("vllm:spec_decode_num_drafts", 0.0)
            accepted += row.server.get("vllm:spec_decode_num_accepted_tokens", 0.0)
    return 1.0 + accepted / drafts if drafts else 1.0


def clean_rounds(frame: pd.DataFrame) -> dict[tuple[str, int], int]:
    """(scenario, level) -> the rounds (repeats) in which every arm's level was a measurement: the rounds its
    ratios pair. Pure."""
    if frame.empty:
        return {}
    found = {}
    for (scenario, level), rows in frame.groupby(["scenario", "level"]):
        arms = rows["arm"].nunique()
        clean = measurements(rows)
        clean = clean[(clean["problems"] == "") & ~clean["incomplete"].astype(bool)]  # a run before ``valid`` too
        measured = clean.groupby("repeat")["arm"].nunique()
        found[(str(scenario), int(level))] = int((measured == arms).sum())
    return found


def _measured_cleanly(results: RunResults, stats, frame: pd.DataFrame) -> list[Check]:
    """A gate reads only runs that finished and levels that held their load and were measured cleanly.

    A level whose load generator was starved of CPU has a problem of its own (``LevelHealth``), and fails
    here, unless the sweep measured it again (``RunConfig.remeasure``) until its ratios had as many rounds
    in which every arm measured as the run asked for: then the check passes and says so. Streams read in one
    piece with a load generator that was not starved are the server's own behaviour (stock vLLM's API server
    on two cores can hold its whole answer at one user): reported, not failed. Runs that did not measure the
    waits fall back on the streams: a stall fails a level when no arm of the run streamed cleanly there."""
    complete = results.complete
    checks = [Check("run complete", "all", None, float(complete), 1.0, complete, "" if complete else str(results.error))]
    cleanest: dict[tuple[str, int], float] = {}
    for (scenario, _arm, level), row in stats.items():
        cleanest[(scenario, level)] = min(cleanest.get((scenario, level), 1.0), row["stalled"])
    rounds = clean_rounds(frame)
    for (scenario, arm, level), row in sorted(stats.items()):
        why = [row["problems"]] if row["problems"] else []
        if row["incomplete"]:
            why.append("the level did not finish")
        stalled = not row["waits_measured"] and row["stalled"] > MAX_STALLED and cleanest[(scenario, level)] > MAX_STALLED
        if stalled:
            why.append(f"{row['stalled']:.0%} of streams arrived in one piece, and no arm streamed cleanly at this level")
        if why:
            clean, wanted = rounds.get((scenario, level), 0), results.config.repeats_at(level)
            remeasured = not row["incomplete"] and not stalled and clean >= wanted
            said = "; ".join(why)
            if remeasured:
                said = f"measured again: {clean} round(s) in which every arm measured, of {wanted} asked for; the round the machine disturbed: {said}"
            checks.append(Check(MEASUREMENT_CHECK, arm, level, float(clean), float(wanted), remeasured, said, scenario))
    return checks


def only_measurement_failed(checks: Sequence[Check]) -> bool:
    """The run failed, but only because some levels were not measured cleanly (a starved load generator, another
    process or the hypervisor on the CPU, lost users): what a second sweep may not meet. Pure."""
    failed = [check for check in checks if not check.passed]
    return bool(failed) and all(check.check == MEASUREMENT_CHECK for check in failed)


def evaluate(
    results: RunResults, thresholds: Thresholds, reference: RunResults | None = None, history: Sequence[HistoryRow] | None = None
) -> list[Check]:
    """Every check the thresholds ask for, in every scenario of the run; a level missing from the run
    fails its check. With ``history`` (earlier complete runs of this machine kind, from the store) each
    speed-up limit comes from them (``reports.history.history_limit``) where there are enough."""
    frame = levels_frame(results)
    stats = _by_arm_level(results, frame)
    speedups, p95s = ratios(frame, thresholds.against, THROUGHPUT), ratios(frame, thresholds.against, P95)
    checks: list[Check] = _measured_cleanly(results, stats, frame)
    machine_class = cpu_class(results.machine)
    min_speedup = thresholds.by_cpu.get(machine_class, thresholds.min_speedup)
    scenarios = sorted({scenario for scenario, _arm, _level in stats}) or [""]
    for scenario in scenarios:
        checks += _scenario_checks(scenario, stats, speedups, thresholds, min_speedup, machine_class, history)
    if thresholds.max_p95_regression is not None and reference is not None:
        if (ref_class := cpu_class(reference.machine)) != machine_class:
            why = f"reference recorded on a CPU of class {ref_class}, this run on {machine_class}: P95 not compared"
            checks.append(Check("P95 vs reference", "all", None, float("nan"), float("nan"), True, why))
            return checks
        reference_frame = levels_frame(reference)
        then = ratios(reference_frame, thresholds.against, P95)
        checks += _p95_checks(stats, _by_arm_level(reference, reference_frame), p95s, then, thresholds, thresholds.max_p95_regression)
    return checks


def _scenario_checks(
    scenario: str,
    stats: dict,
    speedups: dict[Key, PairedRatio],
    thresholds: Thresholds,
    min_speedup: dict[str, dict[int, float]],
    machine_class: str,
    history: Sequence[HistoryRow] | None = None,
) -> list[Check]:
    checks = []
    for arm, levels in thresholds.min_acceptance_length.items():
        for level, minimum in sorted(levels.items()):
            mine = stats.get((scenario, arm, level))
            length = mine["acceptance"] if mine else float("nan")
            checks.append(
                Check("mean acceptance length", arm, level, length, minimum, bool(mine) and length >= minimum, "", scenario)
            )
    for arm, levels in min_speedup.items():
        for level, minimum in sorted(levels.items()):
            base, paired = stats.get((scenario, thresholds.against, level)), speedups.get((scenario, level, arm))
            name = f"speed-up vs {thresholds.against}"
            if paired is None:
                checks.append(Check(name, arm, level, float("nan"), minimum, False, "", scenario))
                continue
            limit = minimum * (1 - _margin(thresholds, base))
            why = f"limit for CPU class {machine_class}"
            if history is not None:
                earlier = [r.measured.ratio for r in history if r.measured.key == (scenario, level, arm, thresholds.against)]
                if (from_history := history_limit(earlier, thresholds.noise_margin)) is not None:
                    limit = from_history[0]
                    why = f"from {len(earlier)} earlier runs of this machine kind: median {statistics.median(earlier):.2f}x less {from_history[1]:.0%}"
                else:
                    why = f"only {len(earlier)} earlier runs of this machine kind (< {MIN_HISTORY}): the thresholds file's {why}"
            checks.append(Check(name, arm, level, paired.ratio, limit, paired.ratio >= limit, why, scenario))
    for arm, maximum in thresholds.max_invalid_rate.items():
        measured = sorted(level for s, a, level in stats if s == scenario and a == arm)
        worst = max((stats[(scenario, arm, level)]["invalid"] for level in measured), default=float("nan"))
        checks.append(Check("not-valid rate", arm, None, worst, maximum, bool(measured) and worst <= maximum, "", scenario))
    return checks


def _p95_checks(
    stats: dict, ref_stats: dict, now: dict[Key, PairedRatio], then: dict[Key, PairedRatio], thresholds: Thresholds, max_regression: float
) -> list[Check]:
    """Each arm's P95 over the reference arm's, paired by repeat, against the same ratio in the reference
    run: the machine's speed today cancels in the ratio (the reference arm runs no code of ours), so no
    speed factor is needed. Without the reference arm in both runs: the absolute P95s."""
    checks = []
    for (scenario, arm, level), mine in sorted(stats.items()):
        ref = ref_stats.get((scenario, arm, level))
        if not ref or arm == thresholds.against:
            continue
        grow = 1 + max_regression + _margin(thresholds, stats.get((scenario, thresholds.against, level)))
        mine_now, mine_then = now.get((scenario, level, arm)), then.get((scenario, level, arm))
        if mine_now is not None and mine_then is not None:
            name = f"P95 / {thresholds.against} P95 vs reference"
            limit = mine_then.ratio * grow
            checks.append(Check(name, arm, level, mine_now.ratio, limit, mine_now.ratio <= limit, "", scenario))
        else:
            checks.append(
                Check(
                    "P95 ms vs reference",
                    arm,
                    level,
                    mine["p95"],
                    ref["p95"] * grow,
                    mine["p95"] <= ref["p95"] * grow,
                    "",
                    scenario,
                )
            )
    return checks


def write_checks(run_dir: Path, checks: Sequence[Check]) -> Path:
    path = Path(run_dir) / CHECKS_FILE
    path.write_text(json.dumps([asdict(check) for check in checks], indent=1), encoding="utf-8")
    return path


def load_checks(run_dir: Path) -> list[Check]:
    """The checks ``write_checks`` saved in a run folder (NaN measures and limits come back as NaN)."""
    path = Path(run_dir) / CHECKS_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return [Check(**row) for row in raw]
    except (OSError, ValueError, TypeError) as exc:
        raise GateError(f"{path}: not a gate's checks ({exc}); fix: run 'dspark-bench gate --run {run_dir}' again") from None


def format_checks(checks: list[Check]) -> str:
    lines = [f"{'result':6}  {'check':44}  {'scenario':18}  {'arm':22}  {'level':>5}  {'measured':>10}  {'limit':>10}"]
    for c in checks:
        level = "all" if c.level is None else str(c.level)
        lines.append(
            f"{'PASS' if c.passed else 'FAIL':6}  {c.check:44}  {c.scenario or 'all':18}  {c.arm:22}  {level:>5}  {c.measured:>10.3f}  "
            f"{('>= ' if c.lower_bound else '<= ') + f'{c.limit:.3f}':>10}"
            + (f"  {c.detail}" if c.detail and (not c.passed or c.measured != c.measured) else "")
        )
    failed = sum(not c.passed for c in checks)
    lines.append(f"gate: {'FAILED' if failed else 'passed'} ({len(checks) - failed}/{len(checks)} checks passed)")
    return "\n".join(lines)
