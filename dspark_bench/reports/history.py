"""A run against the runs before it on the same kind of machine: the ratios a run stores, the history
table, the report's history panel, and the gate's limits taken from history.

History is per machine kind (``MachineFacts.kind``: CPU model, cores, CPU class, GPU), because speed-ups
are facts about a machine: on two cores, dspark / baseline-constrained at one user is ~1x on an AMD EPYC
with AVX2 only and 3.7x on an Intel Xeon with AMX. Limits from history are the median ratio of the last
runs less a margin from their own spread, never from the run under test.
"""

from __future__ import annotations

import html
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from dspark_bench.loadtests.arms import REFERENCE_ARM
from dspark_bench.loadtests.results import RunResults, levels_frame
from dspark_bench.reports.compare import ratios
from dspark_bench.store import HistoryRow, RatioRow

MIN_HISTORY = 3  # complete runs of a machine kind before history sets a limit
HISTORY_RUNS = 10  # the latest runs a panel or a gate looks at
MAX_MARGIN = 0.25  # however spread the history, a limit never drops by more than this


def run_ratios(results: RunResults, against: str = REFERENCE_ARM) -> list[RatioRow]:
    """Every arm's effective-throughput ratio to ``against`` per scenario and level, paired by repeat (the
    summary's estimator); none for a run without that arm."""
    frame = levels_frame(results)
    return [
        RatioRow(str(scenario), float(level), str(arm), against, paired.ratio, paired.low, paired.high, paired.repeats)
        for (scenario, level, arm), paired in sorted(ratios(frame, against).items())
        if arm != against
    ]


@dataclass(frozen=True)
class Standing:
    """This run's ratio at one (scenario, level, arm) beside the same ratio in earlier runs of its machine kind."""

    scenario: str
    level: float
    arm: str
    ratio: float
    runs: int
    median: float | None
    low: float | None  # the lowest and highest earlier ratio
    high: float | None

    @property
    def outside(self) -> bool:
        """Outside the earlier runs' range (with enough of them to have one)."""
        return self.runs >= MIN_HISTORY and self.low is not None and self.high is not None and not self.low <= self.ratio <= self.high


def standings(ratios: Sequence[RatioRow], history: Sequence[HistoryRow]) -> list[Standing]:
    """Each ratio of this run against the same (scenario, level, arm, reference) in ``history``. Pure."""
    earlier: dict[tuple[str, float, str, str], list[float]] = defaultdict(list)
    for row in history:
        earlier[row.measured.key].append(row.measured.ratio)
    out = []
    for r in ratios:
        values = earlier.get(r.key, [])
        median = statistics.median(values) if values else None
        out.append(Standing(r.scenario, r.level, r.arm, r.ratio, len(values), median, min(values, default=None), max(values, default=None)))
    return out


def history_limit(values: Sequence[float], noise_margin: float) -> tuple[float, float] | None:
    """(limit, margin) from earlier runs' ratios: their median less the larger of ``noise_margin`` and their
    relative spread, capped at MAX_MARGIN; None with fewer than MIN_HISTORY runs. Pure."""
    if len(values) < MIN_HISTORY:
        return None
    median = statistics.median(values)
    spread = (max(values) - min(values)) / median if median > 0 else MAX_MARGIN
    margin = min(MAX_MARGIN, max(noise_margin, spread))
    return median * (1 - margin), margin


def format_history(rows: Sequence[HistoryRow]) -> str:
    """The history table: one block per machine kind, one line per run and ratio, oldest first."""
    if not rows:
        return "(no runs in the store match)"
    by_kind: dict[str, list[HistoryRow]] = defaultdict(list)
    for row in rows:
        by_kind[row.machine_kind].append(row)
    lines = []
    for kind, part in sorted(by_kind.items()):
        runs = len({row.run_id for row in part})
        lines.append(f"machine: {kind}  ({runs} run{'s' if runs != 1 else ''})")
        lines.append(f"  {'started':25}  {'run':28}  {'source':6}  {'scenario':18}  {'level':>6}  {'arm':22}  {'ratio':>6}  interval")
        for row in part:
            r = row.measured
            interval = f"{r.low:.2f}-{r.high:.2f}" if r.low is not None and r.high is not None else "-"
            state = "" if row.complete else "  (incomplete)"
            lines.append(
                f"  {row.started[:25]:25}  {row.name[:28]:28}  {row.source[:6]:6}  {r.scenario[:18]:18}  {r.level:>6g}  "
                f"{r.arm[:22]:22}  {r.ratio:>5.2f}x  {interval} vs {r.against}{state}"
            )
    return "\n".join(lines)


def history_panel(kind: str, table: Sequence[Standing], note: str = "") -> list[str]:
    """The report's history section: this run's ratios beside the earlier runs of its machine kind."""
    esc = html.escape
    parts = ["<h2>Against history</h2>", f"<p>Earlier complete runs on this kind of machine ({esc(kind)}), the latest {HISTORY_RUNS} at most.{esc(note)}</p>"]
    if not table:
        return [*parts, "<p>No ratio of this run to compare (its reference arm did not run).</p>"]
    rows = []
    for s in table:
        earlier = f"{s.median:.2f}x ({s.low:.2f}-{s.high:.2f}), {s.runs} runs" if s.median is not None else "no earlier run"
        flag = '<span class="bad">outside the earlier runs\' range</span>' if s.outside else ("" if s.runs >= MIN_HISTORY else "too few runs to judge")
        rows.append(
            f"<tr><td>{esc(s.scenario)}</td><td>{s.level:g}</td><td>{esc(s.arm)}</td><td>{s.ratio:.2f}x</td>"
            f"<td>{esc(earlier)}</td><td>{flag}</td></tr>"
        )
    header = "<tr><th>scenario</th><th>level</th><th>arm</th><th>this run</th><th>earlier runs: median (range)</th><th></th></tr>"
    return [*parts, f"<table>{header}{''.join(rows)}</table>"]
