"""Every figure of a sweep is a steady, independent measurement: each level runs at least MIN_WAVES rounds
of its users, every (repeat, level) sends prompts no earlier one sent, and every arm starts every level
with its prefix cache emptied."""

from __future__ import annotations

import time
from collections import Counter

import httpx
import locust  # noqa: F401 - gevent patches sockets first
import pytest

from dspark_bench.loadtests.config import ConfigError, load_config
from dspark_bench.loadtests.metrics import MIN_WAVES, achieved_concurrency
from dspark_bench.loadtests.records import RequestRecord, read_records
from dspark_bench.loadtests.sweep import prompt_blocks, reused_prompts, run_sweep
from dspark_bench.scenarios import load_scenario

EXAMPLES = "examples/requests.jsonl"


def test_a_closed_loop_level_runs_at_least_four_whole_waves_and_an_open_loop_its_count():
    config = load_config(None, levels="1,8,64", requests_per_level=24, warmup_requests=2)
    # at least 4 waves measured, whole waves sent with the 2 warm-up: 24 at 1 user; 32 + 2 -> 40 - 2 at 8; 256 + 2 -> 320 - 2
    assert [config.measured_requests(level) for level in config.levels] == [24, 38, 318]
    assert load_config(None, levels="8,64", warmup_requests=0).measured_requests(64) == 256  # no warm-up: exactly 4 waves
    assert MIN_WAVES == 4
    assert load_config(None, levels="8", requests_per_level=64, warmup_requests=2).measured_requests(8) == 70  # 64 + 2 -> 9 whole waves
    open_loop = load_config(None, rates=[1.0, 8.0], requests_per_level=24)
    assert [open_loop.measured_requests(rate) for rate in open_loop.rates] == [24, 24]


def test_level_requests_raise_some_levels_and_never_lower_one():
    config = load_config(None, levels="1,8,64", requests_per_level=8, warmup_requests=2, level_requests={1: 24, 8: 62})
    assert config.level_requests == {1: 24, 8: 62}
    assert [config.measured_requests(level) for level in config.levels] == [24, 62, 318]  # 62 + 2 = 8 whole waves of 8
    assert load_config(None, levels="1", requests_per_level=200, level_requests={1: 24}).measured_requests(1) == 200
    for bad in ({16: 4}, {1: 0}):
        with pytest.raises(ConfigError, match="level_requests"):
            load_config(None, levels="1,8", level_requests=bad)


def _record(send: float, end: float, warmup: bool = False) -> RequestRecord:
    return RequestRecord(arm="a", level=2, scenario="s", mode="json_object", request_id=f"r{end}", seed=0, repeat=0,
                         warmup=warmup, t_send=send, t_first_token=None, t_last_byte=end, prompt_tokens=None,
                         output_tokens=1, finish_reason="stop", status=200, error=None, output="{}", verdict="valid")  # fmt: skip


def test_concurrency_is_measured_over_the_wall_time():
    # two users; the last request drains alone for 4 s: in flight 2 for 2 s then 1 for 4 s over 6 s
    records = [_record(0.0, 2.0), _record(0.0, 6.0)]
    assert achieved_concurrency(records) == 8.0 / 6.0  # the old steady span (to the last send) was empty


def test_every_repeat_and_level_gets_prompts_of_its_own():
    config = load_config(None, levels="1,4", requests_per_level=6, warmup_requests=2, repeats=3)
    blocks = prompt_blocks(config)
    assert sorted(blocks) == [(r, i) for r in range(3) for i in range(2)]
    seeds = [(offset, offset + size) for offset, size in blocks.values()]
    # 1 user (who sends no tails): 2 warm-up + 6 measured; 4 users: 2 + 18 (5 whole waves of 4) + 18 spare for tails
    assert [size for _offset, size in blocks.values()] == [8, 38] * 3
    assert all(end <= start for (_s, end), (start, _e) in zip(sorted(seeds), sorted(seeds)[1:], strict=False))  # disjoint
    assert reused_prompts(config, load_scenario("order_extraction")) is None
    small = reused_prompts(config, load_scenario(EXAMPLES))  # 50 lines, 138 prompts asked
    assert small is not None and "50 distinct prompts" in small and "138" in small


@pytest.mark.slow
def test_a_sweep_resets_every_arms_prefix_cache_before_every_level_and_never_repeats_a_prompt_at_any_level_repeats(fast_server, tmp_path):
    config = load_config(
        None, arms="baseline,baseline-constrained", urls={"baseline": fast_server, "baseline-constrained": fast_server},
        scenarios="order_extraction", levels="1,3", requests_per_level=4, warmup_requests=1, repeats=2, level_repeats={1: 3},
        output_dir=str(tmp_path), run_name="r",
    )  # fmt: skip
    before = httpx.get(f"{fast_server}/v1/models", timeout=10).json()["resets"]
    results = run_sweep(config, tmp_path / "r")
    assert results.complete
    server = httpx.get(f"{fast_server}/v1/models", timeout=10).json()
    assert server["resets"] - before == 2 * (3 + 2)  # arms x (1 user's 3 repeats + 3 users' 2)
    # emptied just before each arm's level: an arm never finds the prompts another arm on its server just sent
    # (1 user: 4 + 1 warm-up; 3 users: 14 + 1, 5 whole waves), and the smoke tests' requests came before
    # (3 users: and the tails some users sent while the level's last measured answers ran; 1 user sends none)
    assert [min(n, 15) for n in server["between_resets"][-10:]] == [5, 5, 15, 15] * 2 + [5, 5]  # the third round: 1 user alone
    assert all(level.health.prefix_cache_reset for level in results.levels)
    records = list(read_records(tmp_path / "r"))
    per_arm = Counter((r.arm, r.seed) for r in records)
    assert max(per_arm.values()) == 1  # no arm sends a prompt twice in the run, tails included (prompts of their own)
    prompts = {arm: {r.seed for r in records if r.arm == arm and not r.tail} for arm in config.arms}
    assert prompts["baseline"] == prompts["baseline-constrained"]  # and every arm the same prompts (tails: as many as it took)
    assert Counter((level.level, level.repeat) for level in results.levels) == {(1, 0): 2, (1, 1): 2, (1, 2): 2, (3, 0): 2, (3, 1): 2}
    assert Counter(level.metrics.requests for level in results.levels) == {4: 6, 14: 4}  # 3 users: 4 waves measured at least, 5 sent with the warm-up
    # (whether the machine disturbed a level is not this test's: a loaded one does, and the level says so)


def test_level_repeats_run_some_levels_more_often_with_prompts_of_their_own():
    config = load_config(None, levels="1,8,64", requests_per_level=8, warmup_requests=2, repeats=3, level_repeats={1: 5, 8: 4})
    assert [config.repeats_at(level) for level in config.levels] == [5, 4, 3] and config.most_repeats == 5
    blocks = prompt_blocks(config)
    assert sorted(blocks) == sorted([(r, 0) for r in range(5)] + [(r, 1) for r in range(4)] + [(r, 2) for r in range(3)])
    spans = sorted((offset, offset + size) for offset, size in blocks.values())
    assert all(end <= start for (_s, end), (start, _e) in zip(spans, spans[1:], strict=False))  # disjoint
    assert load_config(None, levels="1,8", repeats=3, level_repeats={8: 2}).most_repeats == 3  # fewer where a level is long
    for bad in ({16: 4}, {1: 0}):
        with pytest.raises(ConfigError, match="level_repeats"):
            load_config(None, levels="1,8", level_repeats=bad)
    with pytest.raises(ConfigError, match="level_repeats"):
        load_config(None, rates=[1.0], level_repeats={1: 4})


def _two_arm_sweep(server: str, out, name: str, **settings):
    """Two arms on one fast fake server, one round of levels 1 and 2 of two requests each, and ``settings``."""
    config = load_config(
        None, arms="baseline,baseline-constrained", urls={"baseline": server, "baseline-constrained": server},
        scenarios="order_extraction", levels="1,2", requests_per_level=2, warmup_requests=1, repeats=1,
        output_dir=str(out), run_name=name, **settings,
    )  # fmt: skip
    results = run_sweep(config, out / name)
    assert results.complete
    return results


@pytest.mark.slow
def test_a_time_budget_adds_rounds_while_they_fit_and_each_gets_prompts_of_its_own(fast_server, tmp_path):
    def sweep(name: str, minutes: float):
        started = time.monotonic()
        results = _two_arm_sweep(fast_server, tmp_path, name, budget_minutes=minutes)
        return results, time.monotonic() - started

    results, took = sweep("budget", 0.3)  # 18 s; a round of both levels takes ~4 s against the fast server (8 s loaded)
    rounds = Counter(level.repeat for level in results.levels)
    assert len(rounds) >= 2 and set(rounds.values()) <= {2, 4}  # rounds added; whole levels (both arms), the last maybe 1 user only
    assert took < 18 + 20  # the budget holds, but for the servers' smoke tests and the last round
    records = list(read_records(tmp_path / "budget"))
    assert max(Counter((r.arm, r.seed) for r in records).values()) == 1  # no prompt twice for an arm
    tiny, _ = sweep("tiny", 0.001)  # no round fits: every level's own repeats and no more
    assert {level.repeat for level in tiny.levels} == {0}
    with pytest.raises(ConfigError, match="budget_minutes"):
        load_config(None, levels="1", arms="baseline,oracle", budget_minutes=5)


@pytest.mark.slow
def test_a_level_the_machine_disturbed_runs_once_more_for_every_arm_up_to_remeasure(fast_server, tmp_path, monkeypatch):
    """A round where some arm's level was not a measurement earns that level one more round for every arm, with
    prompts of its own; at most ``remeasure`` times; the disturbed round stays in the results, not valid."""
    from dataclasses import replace

    import dspark_bench.loadtests.sweep as sweep_module

    real_health = sweep_module.level_health
    calls_at_two: list[int] = []  # the levels at 2 users measured so far, in the sweep under way
    disturbed: set[int] = set()  # which of them the machine "disturbed"

    def health(level, metrics, *args, **kwargs):
        # every level a measurement (a busy machine may disturb a real one of these tiny levels) but those disturbed here
        found = replace(real_health(level, metrics, *args, **kwargs), valid=True, problems=())
        if level != 2:
            return found
        calls_at_two.append(level)
        if len(calls_at_two) - 1 in disturbed:
            return replace(found, valid=False, problems=("the server paused: made by the test",))
        return found

    monkeypatch.setattr(sweep_module, "level_health", health)

    disturbed.update({0, 2})  # the first arm of the first round, and of the round added for it
    results = _two_arm_sweep(fast_server, tmp_path, "run", remeasure=1)
    rounds = Counter((level.level, level.repeat) for level in results.levels)
    assert rounds == {(1, 0): 2, (2, 0): 2, (2, 1): 2}  # one round more at 2 users only, and no more than one
    assert [level.health.valid for level in results.levels if level.level == 2].count(False) == 2
    records = list(read_records(tmp_path / "run"))
    assert max(Counter((r.arm, r.seed) for r in records).values()) == 1  # the added round's prompts are its own
    calls_at_two.clear()
    disturbed.clear()
    disturbed.add(0)
    never = _two_arm_sweep(fast_server, tmp_path, "never", remeasure=0)
    assert Counter((level.level, level.repeat) for level in never.levels) == {(1, 0): 2, (2, 0): 2}


def test_remeasure_is_a_count_and_a_primed_arm_turns_it_off():
    assert load_config(None, levels="1").remeasure_rounds == 0  # the default: a run does what it was asked, no more
    assert load_config(None, levels="1", remeasure=2).remeasure_rounds == 2
    assert load_config(None, levels="1", arms="baseline,oracle", remeasure=2).remeasure_rounds == 0  # primed before it starts
    with pytest.raises(ConfigError, match="remeasure"):
        load_config(None, levels="1", remeasure=-1)
