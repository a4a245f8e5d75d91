"""Which requests draft (acceptance.draft_budget), shadows that earn drafts back, dormant requests, and
the speculation gate's bookkeeping on vLLM's own Request objects."""

from unittest.mock import patch

import pytest

from dspark_serve.acceptance import Acceptance, draft_budget, landed, pass_pays
from dspark_serve.speculation_gate import YOUNG_PROBE, SpeculationGate
from dspark_serve.state import EngineCounters, read_counters


def test_draft_budget_drafts_only_where_it_pays():
    assert draft_budget(0.95, 12) == 12 and draft_budget(0.89, 12) == 12  # JSON the drafter knows: the whole block
    assert draft_budget(0.35, 12) == 0 and draft_budget(0.1, 12) == 0  # drafts that mostly miss: not worth a drafter pass
    assert 0 < draft_budget(0.7, 12) < 12  # in between: a shorter draft
    assert draft_budget(0.9, 0) == 0 and draft_budget(0.99, 5) == 5
    budgets = [draft_budget(rate / 100, 12) for rate in range(0, 100)]
    assert budgets == sorted(budgets)  # never fewer drafts for drafts that land more often
    assert draft_budget(0.6, 12, draft_cost=0.0) > 0  # a free drafter drafts wherever a draft may land


def test_a_uniform_batch_drafts_where_its_mean_gain_pays_for_every_requests_positions():
    from dspark_serve.acceptance import uniform_pays

    for rate in (0.0, 0.3, 0.6, 0.89, 0.99):  # one request, or many alike: what draft_budget says of all n drafts
        for verify, draft in ((0.05, 0.5), (0.01, 0.05)):
            expected = sum(rate**k for k in range(1, 9)) > draft + verify * 8
            assert uniform_pays([rate] * 4, 8, verify, draft) == uniform_pays([rate], 8, verify, draft) == expected
    assert uniform_pays([0.99, 0.0], 8)  # one landing request pays for one that misses
    assert not uniform_pays([0.9] + [0.0] * 7, 8)  # not for seven: every one verifies 8 positions
    assert not uniform_pays([], 8) and not uniform_pays([0.99], 0)


def test_under_asynchronous_scheduling_the_batch_drafts_only_where_every_requests_positions_pay():
    """One request whose drafts land among seven whose drafts miss, verified positions dear: the synchronous
    path drafts for the one and cuts the others; the asynchronous one, where every request of a step verifies
    the same positions, does not draft at all (with ``uniform`` off it drafts, and the hooks cut per request),
    until positions are cheap enough that the one's drafts pay for all eight."""
    from dspark_serve.acceptance import StepCosts

    def gate(uniform: bool = True, verify_cost: float = 0.2) -> SpeculationGate:
        costs = StepCosts()
        costs.relative = lambda batch: (verify_cost, 0.05)  # type: ignore[method-assign]
        made = SpeculationGate(costs=costs, governor=None, uniform=uniform)
        made.history = {"hit": Acceptance(9.5, 0.5)} | {f"miss{i}": Acceptance(0.05, 0.95) for i in range(7)}
        return made

    running = ["hit"] + [f"miss{i}" for i in range(7)]
    assert gate().plan_step(running, 4) == (4, ["hit"])
    assert gate().plan_step(running, 4, asynchronous=True) == (0, ["hit"])  # the dormant ones' context not kept
    assert gate(uniform=False).plan_step(running, 4, asynchronous=True)[0] == 4
    # positions cheap enough for the one's drafts to pay for all eight: all draft, so all keep their context
    assert gate(verify_cost=0.01).plan_step(running, 4, asynchronous=True) == (4, running)


def test_under_asynchronous_scheduling_a_batch_that_stopped_drafting_is_re_judged_at_even_steps():
    """Eight running requests judged dormant, none young: the uniform gate probes the whole batch every
    ``uniform_probe_gap`` steps (every request verifies the probe's drafts), and drafts again once a probe
    finds drafts landing. The gap does not double: a batch whose drafts start to land is found within it."""
    from dspark_serve.acceptance import StepCosts
    from dspark_serve.speculation_gate import LONGEST_PROBE_GAP, uniform_probe_gap

    costs = StepCosts()
    costs.relative = lambda batch: (0.01, 0.05)  # type: ignore[method-assign]
    gate = SpeculationGate(costs=costs, governor=None)
    running = [f"r{i}" for i in range(8)]
    gate.history = {r: Acceptance(0.05, 0.95) for r in running}
    plans = [gate.plan_step(running, 8, asynchronous=True) for _ in range(4 * YOUNG_PROBE)]
    probes = [step for step, (drafts, _live) in enumerate(plans, start=1) if drafts]
    assert probes == [YOUNG_PROBE, 2 * YOUNG_PROBE, 3 * YOUNG_PROBE, 4 * YOUNG_PROBE]  # even, not 32, 64, 128, ...
    assert plans[YOUNG_PROBE - 1] == (8, running)  # a probe: every running request verifies
    for r in running:  # the probe found the batch copying from its prompts
        gate.history[r].record(8, 6)
    assert gate.plan_step(running, 8, asynchronous=True) == (8, running)
    # probes priced: dear positions probe less often, up to the longest gap; cheap ones no closer than YOUNG_PROBE
    assert uniform_probe_gap(8, 0.01, 0.05) == YOUNG_PROBE
    assert uniform_probe_gap(8, 0.2, 0.05) == 165 and uniform_probe_gap(12, 1.0, 0.5) == LONGEST_PROBE_GAP


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
    gate = SpeculationGate(counters, governor=None)
    requests = {"odd": make_request("odd", [1, 2, 3])}
    assert gate.plan_step(["odd"], 12) == (12, ["odd"])  # new, and the server's drafts have landed so far: drafts
    for _ in range(4):  # none of its drafts land, step after step
        _verify(gate, requests, {"odd": list(range(12))}, {"odd": 0})
    drafts = [list(range(12))]
    gate.cut(["odd"], drafts, requests)
    assert drafts == [[]] and "odd" in gate.shadows  # no draft positions: no bitmask rows, no grammar walk, no verification
    gate.shadows.clear()  # (its shadow missed too)
    plans = [gate.plan_step(["odd"], 12) for _ in range(20)]
    assert plans == [(0, [])] * 20  # dormant: no drafter pass, and the worker keeps none of its context
    counts = read_counters(tmp_path)
    assert counts["engine_steps"] == 21 and counts["drafter_steps"] == 1 and counts["probe_steps"] == 0
    assert gate.plan_step(["odd"], 0) == (0, []) and not gate.drafting  # vLLM's own length wins when it says 0


def test_where_vllm_drafts_nothing_at_the_batch_size_no_context_is_kept(tmp_path):
    gate = SpeculationGate(EngineCounters(tmp_path / "engine-1.counters"), governor=None)
    running = [f"new-{i}" for i in range(64)]
    assert gate.plan_step(running, 0) == (0, []) and not gate.drafting  # no draft can follow: keep no context
    assert gate.plan_step(running[:8], 12) == (12, running[:8])  # the batch shrank: new requests draft again
    assert read_counters(tmp_path)["engine_steps"] == 2


def test_a_drafter_pass_for_one_request_of_eight_is_weighed_against_the_eights_step():
    # the pass costs half a plain step, a verified position 2% of a request's share of it
    assert pass_pays([0.7], 1, 12, 0.02, 0.5)  # alone, a request whose drafts land 70% pays for the pass
    assert not pass_pays([0.7], 8, 12, 0.02, 0.5)  # beside seven that do not draft: the pass slows all eight
    assert pass_pays([0.7] * 8, 8, 12, 0.02, 0.5)  # all eight draft
    assert pass_pays([0.7] * 3, 8, 12, 0.02, 0.5) and not pass_pays([0.3] * 8, 8, 12, 0.02, 0.5)
    assert not pass_pays([], 8, 12, 0.02, 0.0)  # nobody to draft for


def test_the_gate_runs_no_pass_for_a_few_requests_of_a_batch_whose_others_are_dormant(make_request):
    gate = SpeculationGate(governor=None)
    running = [f"r{i}" for i in range(8)]
    requests = {r: make_request(r, [1, 2, 3]) for r in running}
    for _ in range(6):  # seven requests' drafts miss, one request's land about 70% of the time
        _verify(gate, requests, {r: list(range(12)) for r in running}, {r: 2 if r == "r0" else 0 for r in running})
    gate.relative_costs = (0.02, 0.5)
    assert gate.budget("r0", 12) > 0 and all(gate.dormant(r, 12) for r in running[1:])
    with patch.object(gate.costs, "relative", return_value=(0.02, 1.0)):  # the pass costs a plain step
        assert gate.plan_step(running, 12) == (0, ["r0"])  # the one that lands keeps its context, no pass
        assert gate.plan_step(running[:1], 12) == (12, ["r0"])  # alone, it drafts
        # a new request beside seven dormant ones: even if its drafts landed, a pass for it would not pay,
        # so it is never probed and its context is not kept
        plans = [gate.plan_step(running[1:] + ["new"], 12) for _ in range(2 * YOUNG_PROBE)]
        assert plans == [(0, [])] * (2 * YOUNG_PROBE)
    with patch.object(gate.costs, "relative", return_value=(0.02, 0.5)):  # a cheaper pass: a new one is probed
        plans = [gate.plan_step(running[1:] + ["newer"], 12) for _ in range(2 * YOUNG_PROBE)]
        assert plans[0] == (12, ["newer"]) and plans.count((0, ["newer"])) >= YOUNG_PROBE  # a probe was due


def test_drafts_the_grammar_refuses_are_misses(make_request):
    gate = SpeculationGate(governor=None)
    assert gate.budget("unseen", 12) > 0  # a new request on a server whose drafts have landed
    for _ in range(6):
        gate.validated("unseen", 12, 0)  # its grammar refuses the first draft each time: nothing gets verified
    assert gate.budget("unseen", 12) == 0 and gate.dormant("unseen", 12)  # judged all the same: the drafter stops
    refused, clean = SpeculationGate(governor=None), SpeculationGate(governor=None)
    for gate, kept in ((refused, 3), (clean, 12)):
        requests = {"r": make_request("r", [1, 2, 3])}
        gate.cut(["r"], [list(range(12))], requests)
        gate.validated("r", 12, kept)
        _verify(gate, requests, {"r": [5, 6, 7]}, {"r": 3})  # the 3 drafts verified all land
    assert refused.history["r"].rate < clean.history["r"].rate  # the grammar's refusal of the 4th is the miss


def test_a_new_request_is_judged_by_a_shadow_when_the_server_drafts_nothing(make_request, tmp_path):
    gate = SpeculationGate(EngineCounters(tmp_path / "engine-1.counters"), governor=None)
    requests = {"old": make_request("old", [1, 2, 3]), "new": make_request("new", [4, 5])}
    for _ in range(30):  # the server's drafts have stopped landing: a new request starts without drafts
        _verify(gate, requests, {"old": list(range(12))}, {"old": 0})
    assert gate.budget("new", 12) == 0
    plans = [gate.plan_step(["old"], 12) for _ in range(YOUNG_PROBE - 1)]
    assert plans == [(0, [])] * (YOUNG_PROBE - 1)  # no probe due yet, and nothing to keep
    # A probe is due: the new request's context is kept from its first step, and the drafter runs once to judge it.
    assert gate.plan_step(["old", "new"], 12) == (12, ["new"])
    assert read_counters(tmp_path)["probe_steps"] == 1
    drafts = [list(range(12)), [50, 51, 52]]
    gate.cut(["old", "new"], drafts, requests)
    assert drafts == [[], []] and set(gate.shadows) == {"old", "new"}
    requests["new"].append_output_token_ids([50, 51, 52])  # what it would have drafted is what it wrote
    requests["old"].append_output_token_ids([9])
    gate.after_step({}, {}, [], requests)
    assert gate.budget("new", 12) > 0 and gate.plan_step(["old", "new"], 12) == (12, ["new"])


def test_where_drafts_miss_probes_grow_apart_and_only_the_probed_requests_context_is_kept(make_request):
    from dspark_serve.speculation_gate import LONGEST_PROBE_GAP

    gate = SpeculationGate(governor=None)
    requests = {"old": make_request("old", [1, 2, 3])}
    for _ in range(30):  # the server's drafts miss
        _verify(gate, requests, {"old": list(range(12))}, {"old": 0})
    plans = [gate.plan_step(["old", f"new-{step}"], 12) for step in range(2000)]  # a new request every step
    probes = [step for step, (drafts, _) in enumerate(plans) if drafts]
    gaps = [later - earlier for earlier, later in zip(probes, probes[1:], strict=False)]
    assert gaps[:5] == [64, 128, 256, 512, 512] and max(gaps) == LONGEST_PROBE_GAP  # each probe found nothing
    # Only the probed request's context is kept: the others arrived between probes, and no probe judges them.
    assert all(live == ([f"new-{step}"] if step in probes else []) for step, (_, live) in enumerate(plans))
    requests["lands"] = make_request("lands", [4, 5])
    for _ in range(4):  # a request whose drafts land: the next probe comes YOUNG_PROBE steps after it drafts
        _verify(gate, requests, {"lands": list(range(12))}, {"lands": 12})
    assert gate.plan_step(["lands"], 12) == (12, ["lands"]) and gate.probe_gap == YOUNG_PROBE


def test_a_shadow_that_would_have_landed_earns_drafts_back(make_request):
    gate = SpeculationGate(governor=None)
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
    gate = SpeculationGate(governor=None)
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


def _machine(fixed_ms: float, per_position_ms: float, drafter_ms: float):
    from dspark_serve.acceptance import StepCosts

    costs = StepCosts()
    for step in range(200):  # 1-user decode steps, verification steps of 13 positions, a prefill now and then
        positions, drafted = ((1, False), (13, True), (150, False))[step % 3 if step % 17 == 0 else step % 2]
        costs.record(positions, drafted, (fixed_ms + per_position_ms * positions + (drafter_ms if drafted else 0)) / 1e3)
    return costs


def test_step_costs_are_measured_and_decide_where_drafting_pays():
    cheap = _machine(fixed_ms=7.0, per_position_ms=0.1, drafter_ms=4.0)  # a CPU with AMX: big verifications are cheap
    dear = _machine(fixed_ms=5.0, per_position_ms=12.0, drafter_ms=30.0)  # AVX2 only: every position costs a step
    fixed, per_position, drafter = dear.fit()
    assert (round(fixed * 1e3, 1), round(per_position * 1e3, 1), round(drafter * 1e3, 1)) == (5.0, 12.0, 30.0)
    for batch in (1, 8):
        verify, draft = cheap.relative(batch)
        assert draft_budget(0.98, 12, verify, draft) == 12  # drafts that land are worth verifying in full
    verify, draft = dear.relative(8)
    assert draft_budget(0.98, 12, verify, draft) == 0  # 8 users: a verified position costs as much as a token
    assert _machine(5.0, 12.0, 30.0).relative(1) != (0.05, 0.5)  # measured, not the fallback constants


def test_the_batch_to_which_drafting_pays_follows_the_measured_costs_and_is_said(tmp_path):
    from dspark_serve.speculation_gate import SAY_EVERY

    cheap, dear = SpeculationGate(costs=_machine(7.0, 0.1, 4.0), governor=None), SpeculationGate(costs=_machine(5.0, 12.0, 30.0), governor=None)
    assert cheap.drafts_pay_to_batch() > 200 and dear.drafts_pay_to_batch() == 0  # AMX-like: most; AVX2-like: none
    middling = SpeculationGate(EngineCounters(tmp_path / "engine-1.counters"), costs=_machine(7.0, 0.3, 4.0), governor=None)
    assert 1 < (paying := middling.drafts_pay_to_batch()) < 256
    for _ in range(SAY_EVERY):
        middling.step_started(8)
        middling.step_finished()
    assert read_counters(tmp_path)["drafts_pay_to_batch"] == middling.drafts_pay_to_batch() > 1  # on /dspark/status
    assert paying > 1


def test_the_batch_to_which_drafting_pays_is_the_largest_that_pays_of_all_256():
    for fixed, per_position, drafter in ((7.0, 0.1, 4.0), (5.0, 12.0, 30.0), (7.0, 0.3, 4.0), (2.0, 0.05, 9.0), (4.0, 1.0, 0.5)):
        for accepted, rejected in ((4.0, 0.5), (1.0, 1.0), (0.3, 3.0), (9.0, 0.1)):
            gate = SpeculationGate(costs=_machine(fixed, per_position, drafter), governor=None)
            gate.population = Acceptance(accepted, rejected)
            paying = [b for b in range(1, 257) if draft_budget(gate.population.rate, 12, *gate.costs.relative(b)) > 0]
            assert gate.drafts_pay_to_batch() == max(paying, default=0), (fixed, per_position, drafter, accepted)


def test_before_enough_steps_the_costs_are_the_fallback_constants():
    from dspark_serve.acceptance import DRAFT_COST, VERIFY_COST, StepCosts

    costs = StepCosts()
    costs.record(1, False, 0.01)
    assert costs.fit() is None and costs.relative(4) == (VERIFY_COST, DRAFT_COST)


def test_before_the_pass_is_measured_a_gpu_lookups_drafts_at_the_rate_prompt_copies_land():
    """vLLM's ngram_gpu looks the prompt up inside the GPU step: at the ~0.35 rate its drafts landed on
    order_extraction they pay, where a model's pass (the 0.5 prior) would keep drafting off until measured."""
    from dspark_serve.acceptance import VERIFY_COST, StepCosts, prior_draft_cost

    lookup, model = StepCosts(draft_prior=prior_draft_cost("ngram_gpu")), StepCosts(draft_prior=prior_draft_cost("dflash"))
    assert draft_budget(0.35, 8, *lookup.relative(1)) > 0 == draft_budget(0.35, 8, *model.relative(1))
    assert lookup.relative(8)[0] == model.relative(8)[0] == VERIFY_COST


def test_once_measured_the_pass_is_kept_when_drafted_steps_grow_too_rare_to_measure_it_again():
    """Where drafting stops, the steps with the pass decay out of the fit; the pass it measured stays (the
    prior would keep drafting off for a reason no step measured)."""
    costs = _machine(fixed_ms=3.0, per_position_ms=0.01, drafter_ms=0.1)  # a GPU lookup: a 30th of a step
    for _ in range(2000):  # drafting stopped: the pass's steps decay far below what tells it apart
        costs.record(1, False, 3.01e-3)
    fixed, _, drafter = costs.fit()
    assert round(fixed * 1e3, 1) == 3.0 and round(drafter * 1e3, 2) == 0.1
    assert costs.relative(1)[1] < 0.05  # the measured pass, not the prior


def test_engine_core_drafts_are_not_booked_as_the_learned_drafters(make_request):
    from dspark_serve.state import ENGINE_DRAFTED

    gate = SpeculationGate(governor=None)
    requests = {"g": make_request("g", [1, 2, 3]), "d": make_request("d", [1, 2, 3])}
    setattr(requests["g"], ENGINE_DRAFTED, "grammar")  # its drafts this step came from its grammar
    setattr(requests["d"], ENGINE_DRAFTED, None)  # the learned drafter's
    _verify(gate, requests, {"g": [5, 6, 7], "d": [5, 6, 7]}, {"g": 0, "d": 0})
    assert "g" not in gate.history and "d" in gate.history


def test_steps_scheduled_asynchronously_are_counted(tmp_path):
    """Steps vLLM's asynchronous scheduler made (whose placeholders the gate cuts, not drafts) are counted, so
    the status can say which path the cap acted on."""
    gate = SpeculationGate(EngineCounters(tmp_path / "engine-1.counters"), governor=None)
    gate.step_started(13)
    gate.step_started(13, asynchronous=True)
    gate.step_started(26, asynchronous=True)
    assert read_counters(tmp_path)["async_steps"] == 2


def test_steps_in_flight_together_are_each_timed_from_the_end_of_the_one_before():
    """vLLM's asynchronous scheduling schedules a step while the one before runs: each step's time is taken
    from the previous step's end (the pipeline's interval), not from its own scheduling, and none is lost."""
    from dspark_serve.acceptance import StepCosts

    recorded: list[tuple[int, float]] = []
    costs = StepCosts()
    costs.record = lambda positions, drafted, seconds: recorded.append((positions, seconds))  # type: ignore[method-assign]
    gate = SpeculationGate(costs=costs, governor=None)
    clock = iter([0.0, 1.0, 3.0, 4.0, 5.0, 7.0, 10.0, 12.0])
    with patch("dspark_serve.speculation_gate.time.perf_counter", lambda: next(clock)):
        gate.step_started(10)  # 0
        gate.step_started(20)  # 1: scheduled while the first runs
        gate.step_finished()  # 3: the first, 3 s from its scheduling
        gate.step_started(30)  # 4
        gate.step_finished()  # 5: the second, 2 s after the first ended (4 after it was scheduled)
        gate.step_finished()  # 7: the third, 2 s after the second ended
        gate.step_started(40)  # 10: after an idle spell, alone
        gate.step_finished()  # 12
    assert recorded == [(10, 3.0), (20, 2.0), (30, 2.0), (40, 2.0)]
