"""The regression gate's checks on hand-made results: each limit can fail, margins come from repeats."""

import pytest

from dspark_bench.loadtests.machine import MachineFacts
from dspark_bench.loadtests.results import RunResults
from dspark_bench.reports.gate import (
    GateError,
    Thresholds,
    evaluate,
    format_checks,
    load_checks,
    load_thresholds,
    only_measurement_failed,
)
from tests.made_results import made_run

_typed = RunResults.from_dict


def _level(arm, level, eff, p95=100.0, invalid=0.0, repeat=0, **more):
    metrics = {"effective_tok_s": eff, "latency_p95_ms": p95, "invalid_json_rate": invalid, "valid_rate": 1 - invalid, **more}
    return {"arm": arm, "scenario": "s", "mode": "json_object", "level": level, "repeat": repeat, "metrics": metrics}


def _results(*levels, complete=True):
    return made_run(list(levels), complete=complete)


def _speedups(checks):
    return [c for c in checks if c.check.startswith("speed-up")]


def test_speedup_passes_and_fails_against_the_same_runs_reference_arm():
    thresholds = Thresholds(against="base", noise_margin=0.0, min_speedup={"fast": {1: 2.0, 8: 1.5}})
    run = _results(_level("base", 1, 100), _level("fast", 1, 210), _level("base", 8, 100), _level("fast", 8, 140))
    checks = evaluate(run, thresholds)
    assert [(c.level, round(c.measured, 2), c.passed) for c in _speedups(checks)] == [(1, 2.1, True), (8, 1.4, False)]
    assert "gate: FAILED (2/3 checks passed)" in format_checks(checks)  # the run-complete check passes


def test_a_missing_level_fails_rather_than_passing_silently():
    checks = evaluate(_results(_level("base", 1, 100)), Thresholds(against="base", min_speedup={"fast": {1: 1.0}}))
    assert not _speedups(checks)[0].passed


def test_the_margin_follows_the_reference_arms_spread_never_the_arm_under_tests():
    thresholds = Thresholds(against="base", noise_margin=0.01, min_speedup={"fast": {1: 2.0}})
    steady = _results(_level("base", 1, 100), _level("fast", 1, 190))
    assert not _speedups(evaluate(steady, thresholds))[0].passed  # 1.9 < 2.0 * 0.99
    erratic = _results(  # the arm under test all over the place: its limit must not loosen
        *(_level("base", 1, 100, repeat=r) for r in range(3)),
        _level("fast", 1, 190, repeat=0),
        _level("fast", 1, 150, repeat=1),
        _level("fast", 1, 230, repeat=2),
    )
    check = _speedups(evaluate(erratic, thresholds))[0]
    assert check.limit == pytest.approx(2.0 * 0.99) and not check.passed
    drifting = _results(  # the machine drifted under both arms alike: the paired ratio holds, the margin widens
        *(_level("base", 1, eff, repeat=r) for r, eff in enumerate((100, 90, 110))),
        *(_level("fast", 1, 2 * eff, repeat=r) for r, eff in enumerate((100, 90, 110))),
    )
    check = _speedups(evaluate(drifting, thresholds))[0]
    assert check.measured == pytest.approx(2.0) and check.limit == pytest.approx(2.0 * (1 - 20 / 100)) and check.passed


def test_checks_are_per_scenario_never_pooled():
    thresholds = Thresholds(against="base", noise_margin=0.0, min_speedup={"fast": {1: 1.5}})
    run = _results(_level("base", 1, 100), _level("fast", 1, 300), _level("base", 1, 100) | {"scenario": "t"},
                   _level("fast", 1, 100) | {"scenario": "t"})  # fmt: skip
    checks = _speedups(evaluate(run, thresholds))
    assert [(c.scenario, c.passed) for c in checks] == [("s", True), ("t", False)]  # pooled, 2.0x would pass


def test_invalid_rate_and_p95_against_the_reference_run():
    thresholds = Thresholds(against="base", noise_margin=0.0, max_invalid_rate={"fast": 0.0}, max_p95_regression=0.2)
    run = _results(_level("fast", 1, 100, p95=130, invalid=0.01))
    reference = _results(_level("fast", 1, 100, p95=100))
    by_check = {c.check: c for c in evaluate(run, thresholds, reference)}
    assert not by_check["not-valid rate"].passed
    assert not by_check["P95 ms vs reference"].passed and by_check["P95 ms vs reference"].limit == pytest.approx(120)


def test_p95_is_held_as_a_ratio_to_the_reference_arm_so_the_machines_speed_cancels():
    """Stock vLLM (the reference arm) twice as slow as when the reference was recorded: the machine, not
    a regression; the arm under test is held to its P95 ratio then, and fails beyond it."""
    thresholds = Thresholds(against="base", noise_margin=0.0, max_p95_regression=0.2)
    reference = _results(_level("base", 8, 100, p95=1000), _level("fast", 8, 200, p95=400))
    slower_machine = _results(_level("base", 8, 50, p95=2000), _level("fast", 8, 100, p95=900))
    checks = [c for c in evaluate(slower_machine, thresholds, reference) if c.check.startswith("P95")]
    assert [(c.arm, c.passed, c.measured, c.limit) for c in checks] == [("fast", True, 0.45, pytest.approx(0.4 * 1.2))]
    regressed = _results(_level("base", 8, 50, p95=2000), _level("fast", 8, 60, p95=1100))
    assert not [c for c in evaluate(regressed, thresholds, reference) if c.check.startswith("P95")][0].passed


def test_noise_margin_is_capped():
    """A spread of 100% must not push the limit to zero: the margin stops at 25%."""
    thresholds = Thresholds(against="base", noise_margin=0.0, min_speedup={"fast": {1: 2.0}})
    wild = _results(_level("base", 1, 50, repeat=0), _level("base", 1, 150, repeat=1), _level("fast", 1, 50, repeat=0),
                    _level("fast", 1, 150, repeat=1))  # fmt: skip
    check = _speedups(evaluate(wild, thresholds))[0]
    assert check.limit == pytest.approx(2.0 * 0.75) and not check.passed  # 1.0x


def test_every_verdict_but_valid_counts_toward_the_invalid_limit():
    thresholds = Thresholds(against="base", max_invalid_rate={"fast": 0.0})
    errors = _results(_level("fast", 1, 100, invalid=0.0) | {"metrics": {"effective_tok_s": 100, "latency_p95_ms": 1,
                      "invalid_json_rate": 0.0, "valid_rate": 0.5}})  # fmt: skip
    assert not next(c for c in evaluate(errors, thresholds) if c.check == "not-valid rate").passed


def test_incomplete_runs_and_levels_not_measured_cleanly_fail():
    thresholds = Thresholds(against="base")
    assert not evaluate(_results(_level("base", 1, 100), complete=False), thresholds)[0].passed
    for bad in (
        {"level_problems": "achieved concurrency 6.0 of 8 (75% < 90%)"},
        {"stalled_stream_rate": 0.3},
        {"incomplete": True},
    ):
        checks = evaluate(_results(_level("base", 8, 100, **bad)), thresholds)
        assert [c.check for c in checks if not c.passed] == ["level measured cleanly"], bad
    assert all(
        c.passed for c in evaluate(_results(_level("base", 8, 100, level_problems="", stalled_stream_rate=0.0)), thresholds)
    )


def test_a_stall_only_one_server_shows_is_that_servers_own():
    """Through the same client at the same level another arm streamed cleanly: the client was able to."""
    thresholds = Thresholds(against="base")
    run = _results(_level("base", 1, 100, stalled_stream_rate=0.5), _level("fast", 1, 200, stalled_stream_rate=0.0))
    assert all(c.passed for c in evaluate(run, thresholds))
    both = _results(_level("base", 1, 100, stalled_stream_rate=0.5), _level("fast", 1, 200, stalled_stream_rate=0.3))
    assert [c.arm for c in evaluate(both, thresholds) if not c.passed] == ["base", "fast"]


def test_thresholds_file_errors_name_the_fix(tmp_path):
    with pytest.raises(GateError, match="no such thresholds file"):
        load_thresholds(tmp_path / "missing.yaml")
    bad = tmp_path / "t.yaml"
    bad.write_text("min_speedups: {}\n")
    with pytest.raises(GateError, match=r"unknown keys \['min_speedups'\]"):
        load_thresholds(bad)
    bad.write_text("min_speedup: {dspark: 3}\n")
    with pytest.raises(GateError, match="arm -> level -> number"):
        load_thresholds(bad)


def test_the_committed_thresholds_file_loads():
    thresholds = load_thresholds("benchmarks/gate/thresholds.yaml")
    assert thresholds.bench_config and thresholds.bench_config.is_file()
    assert thresholds.min_speedup["dspark"][1] > 1


def test_gate_command_on_the_committed_reference_run(tmp_path, capsys):
    import shutil

    from dspark_bench.cli import main

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy("benchmarks/gate/reference/results.json", run / "results.json")
    assert main(["gate", "--run", str(run)]) == 0  # the committed thresholds hold on the reference itself
    strict = tmp_path / "strict.yaml"
    strict.write_text("min_speedup: {dspark: {1: 10.0}}\n")
    assert main(["gate", "--run", str(run), "--thresholds", str(strict)]) == 1
    assert "FAIL" in capsys.readouterr().out
    saved = load_checks(run)  # gate.json, read back as the checks it printed
    failed = [check for check in saved if not check.passed]
    assert failed and failed[0].check.startswith("speed-up") and failed[0].limit == pytest.approx(10.0 * 0.9, rel=0.2)
    assert main(["gate", "--run", str(run), "--thresholds", str(tmp_path / "none.yaml")]) == 2


REFERENCE = __import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks" / "gate" / "reference" / "results.json"
AVX2_RUN = REFERENCE.parents[2] / "cpu-default" / "avx2-fp32-a" / "results.json"  # make bench, AMD EPYC with AVX2 only
DEAD_PATCH_RUN = REFERENCE.parents[1] / "dead-patch-avx512" / "results.json"  # dead-patch.yaml: speculation off, for real
AVX512_STARVED_RUN = (
    REFERENCE.parents[2] / "cpu-default" / "avx512-bf16-s9-a" / "results.json"
)  # make bench; 3 stock levels starved


def test_the_cpu_class_picks_its_own_speed_limits_and_p95_is_compared_on_the_same_class_only():
    import copy
    import json

    from dspark_bench.reports.gate import cpu_class

    reference = json.loads(REFERENCE.read_text())
    assert cpu_class(MachineFacts.from_dict(reference["machine"])) == "amx"
    assert (
        cpu_class(MachineFacts(cpu_flags=("avx512f", "avx2"))) == "avx512"
        and cpu_class(MachineFacts(cpu_flags=("avx2",))) == "avx2"
    )
    thresholds = Thresholds(
        noise_margin=0.0,
        min_speedup={"dspark": {1: 1.8}},
        by_cpu={"avx2": {"dspark": {1: 0.9}}},
        max_p95_regression=1.0,
    )
    same = evaluate(_typed(reference), thresholds, _typed(reference))
    assert _speedups(same)[0].limit == pytest.approx(1.8, abs=0.2)  # margins follow the repeats' spread
    assert any(c.check.startswith("P95") and c.measured == c.measured for c in same)  # compared: same class
    avx2 = copy.deepcopy(reference)
    avx2["machine"]["cpu_flags"], avx2["machine"]["amx"] = ["avx2"], False
    other = evaluate(_typed(avx2), thresholds, _typed(reference))
    assert _speedups(other)[0].limit <= 0.9 and "class avx2" in _speedups(other)[0].detail
    p95 = [c for c in other if c.check.startswith("P95")]
    assert len(p95) == 1 and "not compared" in p95[0].detail


def test_a_patch_whose_speculation_is_off_fails_the_acceptance_check_on_a_real_run():
    import copy
    import json

    reference = json.loads(REFERENCE.read_text())
    thresholds = Thresholds(min_acceptance_length={"dspark": {1: 6.0}})
    assert [c.passed for c in evaluate(_typed(reference), thresholds) if c.check == "mean acceptance length"] == [True]
    dead = copy.deepcopy(reference)  # what --dspark-drafter off records: no drafts at all
    for row in dead["levels"]:
        for key in [k for k in row.get("server", {}) if k.startswith("vllm:spec_decode")]:
            del row["server"][key]
    check = next(c for c in evaluate(_typed(dead), thresholds) if c.check == "mean acceptance length")
    assert not check.passed and check.measured == 1.0


def test_the_committed_gate_fails_a_real_run_of_a_dead_patch():
    """benchmarks/gate/dead-patch.yaml run for real (the dspark arm with --dspark-drafter off, AVX-512 BF16
    EPYC): it fails on acceptance and on speed at both levels."""
    import json

    thresholds = load_thresholds("benchmarks/gate/thresholds.yaml")
    dead = json.loads(DEAD_PATCH_RUN.read_text())
    failed = {
        (c.check, c.level) for c in evaluate(_typed(dead), thresholds, _typed(json.loads(REFERENCE.read_text()))) if not c.passed
    }
    speed = "speed-up vs baseline-constrained"
    assert {("mean acceptance length", 1), (speed, 1), (speed, 8)} <= failed, failed


@pytest.mark.parametrize("run", [REFERENCE, AVX2_RUN], ids=["amx-reference", "avx2-make-bench"])
@pytest.mark.parametrize(
    ("regression", "failing_check"),
    [
        ("30% slower", "speed-up vs baseline-constrained"),
        ("1% not valid", "not-valid rate"),
        ("speculation off", "mean acceptance length"),
    ],
)
def test_the_committed_gate_fails_each_regression_of_a_real_run(run, regression, failing_check):
    """The committed thresholds on committed real runs (the AMX reference; a `make bench` run on an AVX2
    EPYC, checked by its class's limits), each passing as recorded, then made worse one way at a time."""
    import copy
    import json

    thresholds = load_thresholds("benchmarks/gate/thresholds.yaml")
    reference = json.loads(REFERENCE.read_text())
    recorded = json.loads(run.read_text())
    assert all(c.passed for c in evaluate(_typed(recorded), thresholds, _typed(reference)))
    worse = copy.deepcopy(recorded)
    for row in (r for r in worse["levels"] if r["arm"] == "dspark"):
        if regression == "30% slower":
            row["metrics"]["effective_tok_s"] *= 0.7
        elif regression == "1% not valid":
            row["metrics"]["valid_rate"] = min(row["metrics"]["valid_rate"], 0.99)
        else:  # what --dspark-drafter off records: no drafts at all
            row["server"] = {k: v for k, v in row.get("server", {}).items() if not k.startswith("vllm:spec_decode")}
    failed = {c.check for c in evaluate(_typed(worse), thresholds, _typed(reference)) if not c.passed}
    assert failing_check in failed, (regression, failed)


def test_with_the_waits_measured_a_stall_fails_only_where_the_load_generator_was_starved():
    """A stall beside a load generator that got its CPU is the server's own: reported, not failed, even when
    every arm stalls (two API servers on two busy cores). A starved load generator fails the level."""
    thresholds = Thresholds(against="base")
    served = _results(_level("base", 1, 100, stalled_stream_rate=0.7, client_wait_share=0.03, api_server_wait_share=0.6),
                      _level("fast", 1, 200, stalled_stream_rate=0.3, client_wait_share=0.02, api_server_wait_share=0.4))  # fmt: skip
    assert all(c.passed for c in evaluate(served, thresholds))
    starved = _results(_level("base", 1, 100, stalled_stream_rate=0.7, client_wait_share=0.5,
                              level_problems="the load generator was starved: it waited for a CPU 50% of the level"))  # fmt: skip
    assert [c.check for c in evaluate(starved, thresholds) if not c.passed] == ["level measured cleanly"]


def test_only_a_run_whose_sole_failures_are_levels_not_measured_cleanly_is_swept_again():
    """`gate` sweeps once more (--retries) only where the machine, not the patch, failed the run: on the committed
    AVX-512 make-bench run cut to its first five rounds, where its starved stock level at 1 user leaves four
    rounds in which both arms measured of the five asked for, yes; on the real dead-patch run, whose speed and
    acceptance fail, never; on a run that passes, never."""
    import json

    thresholds = load_thresholds("benchmarks/gate/thresholds.yaml")
    reference = _typed(json.loads(REFERENCE.read_text()))
    raw = json.loads(AVX512_STARVED_RUN.read_text())
    raw["levels"] = [level for level in raw["levels"] if level["repeat"] < 5]
    starved = evaluate(_typed(raw), thresholds, reference)
    failed = [c for c in starved if not c.passed]
    assert [(c.check, c.arm, c.level, c.measured, c.limit) for c in failed] == [
        ("level measured cleanly", "baseline-constrained", 1, 4.0, 5.0)
    ]
    assert only_measurement_failed(starved)
    assert not only_measurement_failed(evaluate(_typed(json.loads(DEAD_PATCH_RUN.read_text())), thresholds, reference))
    assert not only_measurement_failed(evaluate(_typed(json.loads(REFERENCE.read_text())), thresholds, reference))


def test_a_level_the_machine_disturbed_passes_once_measured_again_for_its_rounds():
    """The same run whole: the budget's rounds left 10, 11 and 10 in which both arms measured at 1, 8 and 64
    users, more than the 5, 5 and 3 asked for, so its three disturbed stock levels (at 1 and 8 users) pass, and say they were measured
    again. A level re-measured too few times, or one that did not finish, still fails."""
    import json

    thresholds = load_thresholds("benchmarks/gate/thresholds.yaml")
    reference = _typed(json.loads(REFERENCE.read_text()))
    checks = evaluate(_typed(json.loads(AVX512_STARVED_RUN.read_text())), thresholds, reference)
    remeasured = [c for c in checks if c.check == "level measured cleanly"]
    assert [(c.level, c.measured, c.limit, c.passed) for c in remeasured] == [(1, 10.0, 5.0, True), (8, 11.0, 5.0, True)]
    assert all(c.detail.startswith("measured again: ") for c in remeasured)
    disturbed = [_level("base", 8, 100, repeat=0, level_problems="the server paused"), _level("fast", 8, 150, repeat=0)]
    again = [_level("base", 8, 100, repeat=1), _level("fast", 8, 150, repeat=1)]
    config = {"levels": [8], "repeats": 1}
    assert all(c.passed for c in evaluate(made_run([*disturbed, *again], config=config), Thresholds(against="base")))
    assert not all(c.passed for c in evaluate(made_run(disturbed, config=config), Thresholds(against="base")))
    unfinished = [_level("base", 8, 100, repeat=0, incomplete=True), _level("fast", 8, 150, repeat=0), *again]
    assert not all(c.passed for c in evaluate(made_run(unfinished, config=config), Thresholds(against="base")))
