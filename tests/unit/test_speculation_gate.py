"""Which requests draft (acceptance.draft_budget), shadows that earn drafts back, probe steps, and the
speculation gate's bookkeeping on vLLM's own Request objects."""

import pytest

from dspark_bench.engine_patch.acceptance import PROBE_FIRST, PROBE_LONGEST, Acceptance, ProbeClock, draft_budget, landed
from dspark_bench.engine_patch.speculation_gate import SpeculationGate
from dspark_bench.engine_patch.state import EngineCounters, read_counters


def test_draft_budget_drafts_only_where_it_pays():
    assert draft_budget(0.95, 12) == 12 and draft_budget(0.89, 12) == 12  # JSON the drafter knows: the whole block
    assert draft_budget(0.35, 12) == 0 and draft_budget(0.1, 12) == 0  # drafts that mostly miss: not worth a drafter pass
    assert 0 < draft_budget(0.7, 12) < 12  # in between: a shorter draft
    assert draft_budget(0.9, 0) == 0 and draft_budget(0.99, 5) == 5
    budgets = [draft_budget(rate / 100, 12) for rate in range(0, 100)]
    assert budgets == sorted(budgets)  # never fewer drafts for drafts that land more often
    assert draft_budget(0.6, 12, draft_cost=0.0) > 0  # a free drafter drafts wherever a draft may land


def test_acceptance_falls_when_drafts_miss_and_recovers_when_they_land():
    missing = Acceptance().prior()
    assert draft_budget(missing.rate, 12) == 12  # a new request is trusted
    for _ in range(2):
        missing.record(12, 0)  # no draft lands, step after step
    assert draft_budget(missing.rate, 12) == 0
    missing.record(12, 12)  # one step where all land (a verified step or a shadow)
    assert draft_budget(missing.rate, 12) > 0


def test_landed_is_the_common_prefix():
    assert landed([1, 2, 3], [1, 2, 3, 4]) == 3
    assert landed([1, 2, 3], [1, 9, 3]) == 1
    assert landed([1, 2, 3], [1, 2]) == 2  # only what is written so far
    assert landed([], [1]) == 0


def test_probe_clock_doubles_while_nothing_drafts_and_resets_when_something_does():
    clock = ProbeClock()
    runs = [clock.tick(False) for _ in range(PROBE_FIRST + 2 * PROBE_FIRST)]
    assert [i for i, ran in enumerate(runs) if ran] == [PROBE_FIRST - 1, 3 * PROBE_FIRST - 1]
    for _ in range(20 * PROBE_LONGEST):
        clock.tick(False)
    assert clock.interval == PROBE_LONGEST
    assert clock.tick(True) and clock.interval == PROBE_FIRST


@pytest.fixture(scope="module")
def make_request():
    pytest.importorskip("vllm")
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    def make(request_id: str, prompt: list[int]) -> Request:
        return Request(request_id, prompt, SamplingParams(max_tokens=100), None)

    return make


def _verify(gate, requests, drafts_by_id, accepted_by_id):
    """One verification step: each request's scheduled drafts, of which ``accepted`` landed (+ the bonus token)."""
    ids = list(drafts_by_id)
    sampled = [[7] * (accepted_by_id[r] + 1) for r in ids]
    for r, tokens in zip(ids, sampled, strict=True):
        requests[r].append_output_token_ids(tokens)
    gate.after_step(drafts_by_id, {r: i for i, r in enumerate(ids)}, sampled, requests)


def test_a_request_whose_drafts_miss_stops_drafting_and_the_drafter_stops(make_request, tmp_path):
    counters = EngineCounters(tmp_path / "engine-1.counters")
    gate = SpeculationGate(counters)
    requests = {"odd": make_request("odd", [1, 2, 3])}
    assert gate.plan_step(["odd"], 12) == 12  # new: drafts
    for _ in range(4):  # none of its drafts land, step after step
        _verify(gate, requests, {"odd": list(range(12))}, {"odd": 0})
    drafts = [list(range(12))]
    gate.cut(["odd"], drafts, requests)
    assert drafts == [[]]  # no draft positions: no bitmask rows, no grammar walk, no verification
    plans = [gate.plan_step(["odd"], 12) for _ in range(PROBE_FIRST)]
    assert plans == [0] * (PROBE_FIRST - 1) + [12]  # the drafter skips, then runs once to look (a probe)
    counts = read_counters(tmp_path)
    assert counts["engine_steps"] == PROBE_FIRST + 1 and counts["drafter_steps"] == 2 and counts["probe_steps"] == 1
    assert gate.plan_step(["odd"], 0) == 0 and not gate.drafting  # vLLM's own length wins when it says 0


def test_a_shadow_that_would_have_landed_earns_drafts_back(make_request):
    gate = SpeculationGate()
    requests = {"odd": make_request("odd", [1, 2, 3]), "json": make_request("json", [4, 5])}
    for _ in range(4):
        _verify(gate, requests, {"odd": list(range(12)), "json": list(range(12))}, {"odd": 0, "json": 12})
    start = requests["odd"].num_tokens
    drafts = [[40, 41, 42, 43], list(range(12))]
    gate.cut(["odd", "json"], drafts, requests)
    assert drafts[0] == [] and len(drafts[1]) == 12  # "json" keeps its drafts, "odd" keeps them aside
    assert gate.shadows["odd"].start == start and gate.shadows["odd"].drafts == [40, 41, 42, 43]
    requests["odd"].append_output_token_ids([40, 41])
    gate.after_step({}, {}, [], requests)
    assert "odd" in gate.shadows  # two of four checked, no miss yet: wait
    requests["odd"].append_output_token_ids([42, 43])
    gate.after_step({}, {}, [], requests)
    assert "odd" not in gate.shadows and gate.budget("odd", 12) > 0  # every draft would have landed


def test_a_shadow_resolves_at_the_first_miss_and_finished_requests_are_forgotten(make_request):
    gate = SpeculationGate()
    requests = {"odd": make_request("odd", [1, 2, 3])}
    for _ in range(4):
        _verify(gate, requests, {"odd": list(range(12))}, {"odd": 0})
    drafts = [[40, 41, 42, 43]]
    gate.cut(["odd"], drafts, requests)
    requests["odd"].append_output_token_ids([40, 9])
    gate.after_step({}, {}, [], requests)
    assert "odd" not in gate.shadows and gate.budget("odd", 12) == 0  # 1 of 4 would have landed: still not worth it
    gate.after_step({}, {}, [], {})
    assert gate.history == {} and gate.shadows == {}
