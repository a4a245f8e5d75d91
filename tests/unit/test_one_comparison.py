"""Every figure the report prints for a pair of arms is the Comparison's, on committed runs: the summary's
ratio and interval, the verdict's sentence, the article table's throughput rows and the gate's speed-up
checks; and each interval holds its own point (a verdict once read "3.57x (3.15-3.55)": the point from the
summary's span-based throughput, the interval from a wall-time one)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dspark_bench.loadtests.arms import REFERENCE_ARM
from dspark_bench.loadtests.results import load_results
from dspark_bench.reports.article import article_table, load_records
from dspark_bench.reports.compare import build_comparison
from dspark_bench.reports.gate import Thresholds, evaluate
from dspark_bench.reports.html import _verdicts
from dspark_bench.reports.tables import INTERVAL_COLUMN, SPEEDUP_COLUMN, interval_text, summary_frame

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = [
    "benchmarks/cpu-default/avx512-bf16-s18",  # make bench on a 2-core EPYC, 16 repeats a level
    "benchmarks/gpu/h200-s49-order",  # three arms on an H200, a level cut by the run's end
    "benchmarks/gate/reference",  # one repeat: no interval
]
VERDICT = re.compile(r"<b>(?P<scenario>[^<]+)</b>, (?P<arm>[^:]+): (?P<ratio>[\d.]+)x(?: \((?P<low>[\d.]+)-(?P<high>[\d.]+)\))? at (?P<level>[\d.]+) ")


@pytest.fixture(scope="module", params=COMMITTED)
def run(request):
    folder = ROOT / request.param
    results, records = load_results(folder), load_records(folder)
    return results, records, build_comparison(results, records)


def test_the_summary_prints_the_comparisons_ratio_and_interval(run):
    results, records, comparison = run
    summary = summary_frame(results, records, comparison)
    checked = 0
    for row in summary.itertuples(index=False):
        key = (row.scenario, row.level, row.arm)
        paired = comparison.throughput.get(key)
        printed = row[summary.columns.get_loc(SPEEDUP_COLUMN)]
        if paired is None:
            assert printed != printed  # NaN: no pair of measured repeats
            continue
        assert printed == paired.ratio
        assert row[summary.columns.get_loc(INTERVAL_COLUMN)] == interval_text(paired)
        if paired.interval is not None:
            assert paired.low <= paired.ratio <= paired.high
        checked += 1
    assert checked


def test_the_verdict_says_the_comparisons_figures(run):
    results, records, comparison = run
    html = "".join(_verdicts(summary_frame(results, records, comparison), comparison))
    found = list(VERDICT.finditer(html))
    assert found, html
    for match in found:
        paired = comparison.throughput[(match["scenario"], float(match["level"]), match["arm"])]
        assert match["ratio"] == f"{paired.ratio:.2f}"
        if match["low"] is not None:
            assert (match["low"], match["high"]) == tuple(f"{v:.2f}" for v in paired.interval)
            assert float(match["low"]) <= float(match["ratio"]) <= float(match["high"])


def test_the_article_table_prints_the_comparisons_throughput_ratios(run):
    results, records, comparison = run
    if records.empty:
        pytest.skip("a run committed without its records: no article table")
    for scenario in {key[0] for key in comparison.throughput}:
        table = article_table(records, results, scenario, base=REFERENCE_ARM, treat="dspark").set_index("metric")
        rows = [metric for metric in table.index if metric.startswith("effective JSON throughput")]
        assert rows
        for metric in rows:
            level = float(metric.rsplit(" ", 1)[1])
            paired = comparison.throughput.get((scenario, level, "dspark"))
            change = table.loc[metric]["change (95% CI)"]
            if paired is None:
                assert change.startswith("nan")
                continue
            assert change.startswith(f"{paired.ratio:.2f}x")
            if paired.interval is not None:
                assert change == f"{paired.ratio:.2f}x ({paired.interval[0]:.2f}-{paired.interval[1]:.2f})"


def test_the_gate_checks_the_comparisons_ratios(run):
    results, _records, comparison = run
    arms = {arm for _scenario, _level, arm in comparison.throughput if arm != REFERENCE_ARM}
    levels = {int(level) for _scenario, level, _arm in comparison.throughput}
    thresholds = Thresholds(min_speedup={arm: dict.fromkeys(levels, 0.0) for arm in arms})
    checks = [check for check in evaluate(results, thresholds) if check.check.startswith("speed-up")]
    assert checks
    for check in checks:
        paired = comparison.throughput.get((check.scenario, float(check.level), check.arm))
        assert (check.measured != check.measured) if paired is None else check.measured == paired.ratio


def test_the_summary_says_how_many_of_a_levels_rounds_were_measurements():
    """A level measured again after the machine disturbed a round reads 2/3, not NO: its ratio pairs the rounds
    that measured (the disturbed round is out of it)."""
    from tests.made_results import made_run

    def level(arm, repeat, eff, **health):
        return {"arm": arm, "scenario": "s", "level": 8, "repeat": repeat, "metrics": {"effective_tok_s": eff, **health}}

    run = made_run([
        level(REFERENCE_ARM, 0, 50, level_valid=False, level_problems="the server paused"), level("dspark", 0, 200, level_valid=True),
        *(level(arm, r, eff, level_valid=True) for r in (1, 2) for arm, eff in ((REFERENCE_ARM, 100), ("dspark", 200))),
    ])  # fmt: skip
    summary = summary_frame(run).set_index("arm")
    assert summary.loc[REFERENCE_ARM, "level ok"] == "2/3" and summary.loc["dspark", "level ok"] == "yes"
    assert summary.loc["dspark", SPEEDUP_COLUMN] == pytest.approx(2.0)  # 200/100 twice, never 200/50
