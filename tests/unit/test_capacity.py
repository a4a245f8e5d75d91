"""Capacity at an SLO: the search brackets then bisects to its resolution, and a sweep finds the capacity of
a server that has one."""

import itertools

import pytest

from dspark_bench.loadtests.capacity import HALVINGS, MIN_RATE, CapacitySearch, Probe, probe_again
from dspark_bench.loadtests.config import ConfigError, load_config
from dspark_bench.loadtests.results import load_results
from dspark_bench.loadtests.sweep import run_sweep
from dspark_bench.reports.tables import capacity_lines
from tests.conftest import start_fake_stream_server


def _search_against(true_capacity: float, start: float, resolution: float = 0.1) -> CapacitySearch:
    search = CapacitySearch(start, share=0.9, resolution=resolution)
    while (rate := search.next_rate()) is not None:
        held = rate <= true_capacity
        search.probes.append(Probe(rate, 1.0 if held else 0.5, held))
    return search


@pytest.mark.parametrize(("true_capacity", "start"), [(5.3, 1.0), (0.7, 4.0), (37.0, 2.0), (1.0, 1.0)])
def test_the_search_brackets_then_bisects_to_its_resolution(true_capacity, start):
    search = _search_against(true_capacity, start)
    low, high = search.bracket
    assert low <= true_capacity < high and high <= low * 1.1 and search.resolved
    assert search.capacity == low and len(search.probes) <= 10
    # a second search from elsewhere finds it again within the resolution
    again = _search_against(true_capacity, start * 1.5).capacity
    assert abs(again - low) <= 0.1 * low


def test_a_server_that_never_holds_the_slo_has_no_capacity():
    search = _search_against(0.0, 1.0)
    assert search.capacity is None and not search.resolved and min(p.rate for p in search.probes) == 1.0 / 2**HALVINGS
    assert min(p.rate for p in _search_against(0.0, 0.05).probes) >= MIN_RATE


def test_a_search_that_stopped_proposes_nothing():
    search = CapacitySearch(1.0, 0.9, 0.1)
    search.probes.append(Probe(1.0, 0.0, False, valid=False, problems=("achieved rate 0.5 of 1",)))
    search.stopped = "not a measurement"
    assert search.next_rate() is None and search.result("a", "s", {}).probes[0].valid is False


def test_capacity_settings_are_checked():
    with pytest.raises(ConfigError, match="the rate the search starts from"):
        load_config(None, find_capacity=True, rates=[1.0, 2.0])
    with pytest.raises(ConfigError, match="capacity_share"):
        load_config(None, find_capacity=True, capacity_share=1.5)
    assert load_config(None, find_capacity=True).find_capacity is True


@pytest.mark.slow
def test_a_sweep_finds_the_capacity_of_a_server_that_has_one(tmp_path):
    # one answer at a time, 50 ms each: 20 answers per second, past which requests queue
    url, server = start_fake_stream_server("--slots", "1", "--tokens", "10", "--token-ms", "5")
    dataset = tmp_path / "objects.jsonl"  # requests whose schema the fake server's answer meets
    dataset.write_text("".join(f'{{"prompt": "object {i}", "schema": {{"type": "object"}}}}\n' for i in range(50)))
    try:
        config = load_config(None, arms="baseline-constrained", urls={"baseline-constrained": url}, find_capacity=True,
                             scenarios=str(dataset),
                             rates=[4.0], arrival="constant", requests_per_level=24, warmup_requests=0,
                             slo={"e2e_ms": 150.0}, capacity_resolution=0.2, output_dir=str(tmp_path), run_name="cap")  # fmt: skip
        results = run_sweep(config, tmp_path / "cap")
    finally:
        server.kill()
        server.wait()
    assert results.complete
    [entry] = load_results(tmp_path / "cap").capacity
    # the queue starts at 20/s; how far below it the answers stay within 150 ms is the machine's speed, not asserted
    assert entry.resolved and 0 < entry.capacity_req_s <= 20, entry
    first, second = entry.probes[:2]
    assert first.rate == 4.0 and second.rate == (8.0 if first.passed else 2.0)  # doubled, or halved, from the first rate
    # each probe a level of the run, or two where the first was disturbed (its load, or a miss beside other work)
    runs = [list(run) for _rate, run in itertools.groupby(results.levels, key=lambda level: level.level)]
    assert [run[0].level for run in runs] == [probe.rate for probe in entry.probes], entry
    assert all(len(run) == 1 or (len(run) == 2 and run[0].health.problems) for run in runs)
    assert "baseline-constrained: holds" in "\n".join(capacity_lines(results))


def test_a_probe_runs_again_where_its_load_did_not_hold_or_it_missed_beside_other_work():
    load, noise = ("achieved rate 2.1/s of 4/s",), ("other processes took 91% of the machine's CPU",)
    assert probe_again(load, (), passed=False) and probe_again(load, noise, passed=False)
    assert probe_again((), noise, passed=False)  # the busy machine may have made the miss
    assert not probe_again((), noise, passed=True)  # a pass beside other work stands
    assert not probe_again((), (), passed=False)  # a clean miss is the server's


@pytest.mark.slow
def test_a_probe_where_most_requests_fail_is_a_miss_not_the_end_of_the_run(tmp_path):
    # every answer takes 0.5 s and the client gives up after 0.2 s: every request of every probe times out
    url, server = start_fake_stream_server("--tokens", "10", "--token-ms", "50")
    dataset = tmp_path / "objects.jsonl"
    dataset.write_text("".join(f'{{"prompt": "object {i}", "schema": {{"type": "object"}}}}\n' for i in range(50)))
    try:
        config = load_config(None, arms="baseline-constrained", urls={"baseline-constrained": url}, find_capacity=True,
                             scenarios=str(dataset), rates=[8.0], arrival="constant", requests_per_level=4, warmup_requests=0,
                             request_timeout_s=0.2, output_dir=str(tmp_path), run_name="fails")  # fmt: skip
        results = run_sweep(config, tmp_path / "fails")
    finally:
        server.kill()
        server.wait()
    assert results.complete and results.error is None
    [entry] = load_results(tmp_path / "fails").capacity
    assert entry.capacity_req_s is None and [p.passed for p in entry.probes] == [False] * 5  # 8/s, then halved 4 times
