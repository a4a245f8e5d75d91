"""The typed results model: every committed run loads, a written run reads back equal, schema 1's health
facts move out of the metrics, and a level's health is a pure function of what was measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspark_bench.loadtests.config import load_config
from dspark_bench.loadtests.deploy.engine_log import EngineFacts
from dspark_bench.loadtests.machine import MachineFacts
from dspark_bench.loadtests.metrics import LevelHealth, level_health, level_metrics
from dspark_bench.loadtests.results import (
    HEALTH_COLUMNS,
    RESULTS_SCHEMA,
    ArmFacts,
    LevelResult,
    ResultsError,
    RunResults,
    levels_frame,
    load_results,
)
from tests.made_results import NO_METRICS

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted((ROOT / "benchmarks").rglob("results.json"))
STUDY_OUTPUTS = ("crosscheck", "equality")  # folders named so (equality-s15...) hold rows, not levels


def _study_output(path) -> bool:
    return any(part.startswith(STUDY_OUTPUTS) for part in path.relative_to(ROOT).parts)  # a study's folder, or one inside it


def test_every_committed_run_loads_into_the_typed_model():
    runs = [path for path in COMMITTED if not _study_output(path)]
    assert len(runs) >= 20
    for path in runs:
        results = load_results(path)
        assert results.levels and all(isinstance(level.health, LevelHealth) for level in results.levels), path
        assert results.machine.cpu and results.config.scenarios, path
        frame = levels_frame(results)
        assert set(HEALTH_COLUMNS) <= set(frame.columns) and len(frame) == len(results.levels), path


@pytest.mark.parametrize("path", [p for p in COMMITTED if _study_output(p)], ids=lambda p: p.parent.name)
def test_a_study_output_is_refused_with_its_name(path):
    with pytest.raises(ResultsError, match=f"{path}: no list of levels"):
        load_results(path)


ENGINE = EngineFacts(runner="V2", cudagraph_mode="FULL_AND_PIECEWISE", graphs={"FULL": 545, "PIECEWISE": 72}, attention="FLASH_ATTN")


def test_a_written_run_reads_back_equal(tmp_path):
    config = load_config(None, levels=[1, 8], slo={"e2e_ms": 900.0}, custom_arms=[{"name": "mine", "mode": "json_schema"}])
    health = LevelHealth(valid=False, problems=("achieved concurrency 6.0 of 8 (75% < 90%)",), prefix_cache_reset=True, steal_share=0.01)
    level = LevelResult("mine", "order_extraction", "json_schema", 8, 1, level_metrics([]), health, {"vllm:x": 2.0})
    written = RunResults(tmp_path, config, {"mine": ArmFacts("http://h", "m", ["vllm"], {"A": "1"}, engine=ENGINE)}, [level], complete=True)
    written.write()
    read = load_results(tmp_path)
    assert json.loads((tmp_path / "results.json").read_text())["schema"] == RESULTS_SCHEMA
    assert read.levels == written.levels and read.arms == written.arms and read.machine == written.machine
    assert read.config == config and read.complete and read.finished
    assert read.arms["mine"].engine == ENGINE  # typed again, not a dict
    older = json.loads((tmp_path / "results.json").read_text())
    del older["arms"]["mine"]["engine"]  # a run written before the engine facts
    assert RunResults.from_dict(older).arms["mine"].engine == EngineFacts()


def test_schema_1_health_moves_out_of_the_metrics():
    raw = {"levels": [{"arm": "a", "scenario": "s", "mode": "prompt", "level": 8, "repeat": 0,
                       "metrics": {**NO_METRICS, "level_valid": False, "level_problems": "x; y", "incomplete": True,
                                   "other_cpu_share": 0.2}}]}  # fmt: skip
    level = RunResults.from_dict(raw).levels[0]
    assert level.health == LevelHealth(valid=False, problems=("x", "y"), incomplete=True, other_cpu_share=0.2)
    older = {"levels": [{"arm": "a", "scenario": "s", "level": 8, "metrics": dict(NO_METRICS)}]}  # before the checks
    assert RunResults.from_dict(older).levels[0].health.valid is None


def test_unreadable_results_name_the_file_and_why(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"schema": RESULTS_SCHEMA + 1, "levels": []}))
    with pytest.raises(ResultsError, match="newer than this dspark-bench reads"):
        load_results(tmp_path)
    path.write_text(json.dumps({"levels": [{"arm": "a", "scenario": "s", "level": 1, "metrics": {}}]}))
    with pytest.raises(ResultsError, match="a level of arm 'a' lacks"):
        load_results(path)
    path.write_text("{")
    with pytest.raises(ResultsError, match="cannot read it"):
        load_results(path)


def test_report_of_unreadable_results_is_one_line_and_exit_2(tmp_path, capsys):
    from dspark_bench.cli import main

    (tmp_path / "results.json").write_text(json.dumps({"schema": 99, "levels": []}))
    assert main(["report", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def _metrics(**values):
    return level_metrics([]).__class__(**{**NO_METRICS, **values})


def test_level_health_names_every_reason_a_level_is_not_a_measurement():
    steady = _metrics(achieved_concurrency=7.9)
    assert level_health(8, steady, {"client_cpu_share": 0.3}, {"other_cpu_share": 0.02}, None, False, True).valid
    held_back = level_health(8, _metrics(achieved_concurrency=6.0), {"client_cpu_share": 0.95}, {}, None, False, True)
    assert not held_back.valid and len(held_back.problems) == 2 and "achieved concurrency 6.0 of 8" in held_back.problems[0]
    noisy = level_health(8, steady, {}, {"other_cpu_share": 0.3, "steal_share": 0.1}, None, False, None)
    assert not noisy.valid and len(noisy.problems) == 2 and noisy.other_cpu_share == 0.3
    assert noisy.load_problems == () and held_back.load_problems == held_back.problems  # the load's own, noise apart
    both = level_health(8, _metrics(achieved_concurrency=6.0), {}, {"steal_share": 0.1}, None, False, None)
    assert len(both.problems) == 2 and both.load_problems == both.problems[:1] and both.noise == both.problems[1:]
    assert noisy.noise == noisy.problems and held_back.noise == ()
    # an open loop is held to the rate its schedule asked for, not to the nominal one
    late = level_health(4.0, _metrics(achieved_rate=2.0, scheduled_rate=3.9), {}, {}, 4.0, False, None)
    on_time = level_health(4.0, _metrics(achieved_rate=3.6, scheduled_rate=3.8), {}, {}, 4.0, False, None)
    assert not late.valid and on_time.valid
    # the server paused: every stream silent for 8.7 s where chunks came 140 ms apart at worst
    paused = level_health(64, _metrics(achieved_concurrency=64.0, longest_silence_ms=8745.0, itl_p99_ms=141.0), {}, {}, None, False, True)
    assert not paused.valid and "the server paused" in paused.problems[0] and paused.load_problems == paused.problems
    slow_model = _metrics(achieved_concurrency=64.0, longest_silence_ms=8745.0, itl_p99_ms=2000.0)  # long steps are no pause
    assert level_health(64, slow_model, {}, {}, None, False, True).valid


def test_machine_facts_round_trip_and_old_runs_lack_flags():
    assert MachineFacts.from_dict({"cpu": "X", "cores": 2, "summary": "ignored"}).cpu_flags is None


def test_ratios_pair_only_the_repeats_in_which_both_levels_were_measurements():
    import pandas as pd

    from dspark_bench.reports.compare import ratios as ratios_to

    rows = [("stock", 0, 100.0, True), ("stock", 1, 100.0, True), ("stock", 2, 40.0, False),  # paused
            ("dspark", 0, 300.0, True), ("dspark", 1, 300.0, True), ("dspark", 2, 300.0, True)]  # fmt: skip
    frame = pd.DataFrame(
        [{"scenario": "s", "level": 8.0, "arm": arm, "repeat": repeat, "effective_tok_s": eff, "valid": valid} for arm, repeat, eff, valid in rows]
    )
    paired = ratios_to(frame, "stock")[("s", 8.0, "dspark")]
    assert paired.repeats == 2 and paired.ratio == pytest.approx(3.0)  # not 7.5 from the paused level
    before_the_check = ratios_to(frame.assign(valid=None), "stock")[("s", 8.0, "dspark")]
    assert before_the_check.repeats == 3
