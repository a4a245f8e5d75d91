import pytest

from dspark_bench.loadtests.metrics import level_metrics
from dspark_bench.loadtests.records import RequestRecord


def rec(t_send, ttft, e2e, tokens, verdict="valid", warmup=False):
    return RequestRecord(
        arm="a",
        level=2,
        scenario="s",
        mode="json_object",
        request_id=f"r{t_send}",
        seed=0,
        repeat=0,
        warmup=warmup,
        t_send=t_send,
        t_first_token=None if ttft is None else t_send + ttft,
        t_last_byte=None if e2e is None else t_send + e2e,
        prompt_tokens=10,
        output_tokens=tokens,
        finish_reason="stop",
        status=200,
        error=None,
        output="",
        verdict=verdict,
    )


def test_level_metrics_by_hand():
    records = [
        rec(0.0, 0.1, 1.0, 10),  # valid, TPOT (1.0-0.1)/9 = 0.1
        rec(0.0, 0.2, 2.0, 21),  # valid, TPOT 1.8/20 = 0.09
        rec(1.0, 0.1, 3.0, 30, verdict="parse_error"),  # ends at 4.0
        rec(2.0, None, 0.5, None, verdict="http_error"),
        rec(-5.0, 0.1, 1.0, 99, warmup=True),  # excluded
    ]
    m = level_metrics(records)
    assert m.requests == 4 and m.completed == 3
    assert m.wall_s == pytest.approx(4.0)  # first send 0.0, last byte 4.0
    assert m.effective_tok_s == pytest.approx(31 / 4.0)
    assert m.raw_tok_s == pytest.approx(61 / 4.0)
    assert m.requests_per_s == pytest.approx(3 / 4.0)
    assert m.latency_p50_ms == pytest.approx(2000.0)  # median of 1, 2, 3 s
    assert m.latency_p95_ms == pytest.approx(2900.0)  # numpy linear: 2 + 0.9 * 1
    assert m.ttft_p50_ms == pytest.approx(100.0)
    assert m.tpot_mean_ms == pytest.approx((100 + 90 + 2900 / 29) / 3)
    assert m.invalid_json_rate == pytest.approx(0.25)
    assert m.rate_http_error == pytest.approx(0.25)
    assert m.valid_rate == pytest.approx(0.5)
    assert m.stalled_stream_rate == 0.0


def test_throughputs_leave_out_the_server_time_of_unmeasured_requests_beside_the_measured():
    measured = [rec(0.0, 0.1, 1.0, 10), rec(0.0, 0.1, 2.0, 10)]
    tail = rec(1.0, 0.1, 2.0, 50, warmup=True)  # a closed loop's tail: runs 1.0-3.0, the level ends at 2.0
    m = level_metrics([*measured, tail])
    assert m.wall_s == pytest.approx(2.0) and m.achieved_concurrency == pytest.approx(2.0)
    # 3 of the 4 request-seconds in flight over the 2 s were the measured requests': a 1.5 s span
    assert m.effective_tok_s == pytest.approx(20 / 1.5) and m.requests_per_s == pytest.approx(2 / 1.5)
    assert m.span_s == pytest.approx(1.5)  # said beside the wall time: the summary's "span s"
    assert level_metrics(measured).effective_tok_s == pytest.approx(20 / 2.0)  # alone: the wall time


def test_streams_read_in_one_piece_are_flagged():
    records = [
        rec(0.0, 0.95, 1.0, 40),  # first content after 95% of the latency: read in one piece
        rec(0.0, 0.10, 1.0, 40),
        rec(0.0, 0.50, 0.5, 3),  # too short to tell (one chunk can hold it all)
        rec(0.0, 0.90, 1.0, 40, verdict="parse_error"),  # at the 90% line: counted, whatever the verdict
    ]
    assert level_metrics(records).stalled_stream_rate == pytest.approx(2 / 3)


def test_empty_level_is_zero_not_a_crash():
    m = level_metrics([])
    assert m.requests == 0 and m.effective_tok_s == 0.0 and m.latency_p95_ms is None


def test_server_counter_deltas():
    from dspark_bench.loadtests.server_metrics import delta

    before = {"vllm:spec_decode_num_drafts": 10, "vllm:spec_decode_num_accepted_tokens": 50, "dspark_constrained_tokens": 100}
    after = {
        "vllm:spec_decode_num_drafts": 30,
        "vllm:spec_decode_num_accepted_tokens": 250,
        "dspark_grammar_forced_tokens": 20,
        "dspark_constrained_tokens": 300,
        "vllm:prefix_cache_queries": 400,
        "vllm:prefix_cache_hits": 100,
    }
    out = delta(before, after)
    assert out["mean_acceptance_length"] == 11.0  # 1 + 200 accepted / 20 steps
    assert out["grammar_forced_share"] == 0.1 and out["prefix_cache_hit_rate"] == 0.25
    assert "grammar_forced_share" not in delta({}, {"vllm:generation_tokens": 5})  # stock vLLM: no such counters
    assert "grammar_draft_share" not in delta({}, {"vllm:generation_tokens": 5})
    drafted = delta({"vllm:generation_tokens": 100, "dspark_grammar_drafts_accepted": 10, "dspark_repeat_drafts_accepted": 0},
                    {"vllm:generation_tokens": 300, "dspark_grammar_drafts_accepted": 60, "dspark_repeat_drafts_accepted": 20})  # fmt: skip
    assert drafted["grammar_draft_share"] == 0.25  # 50 of the level's 200 output tokens came from grammar drafts
    assert drafted["repeat_draft_share"] == 0.1
    assert delta(None, after) == {}


def test_the_gates_counts_are_differences_and_its_measured_costs_the_levels_last_values():
    import httpx

    from dspark_bench.loadtests import server_metrics

    def page(steps: int, plain: int, fixed_us: int) -> str:  # as prometheus_client writes dspark-serve's
        counters = {"engine_steps": steps, "plain_steps": plain, "drafter_steps": steps // 4, "engine_hook_us": 3 * steps}
        text = "".join(f"# TYPE dspark_{name}_total counter\ndspark_{name}_total {value}.0\n" for name, value in counters.items())
        by_method = {"Scheduler.update_from_output": 2 * steps, "EngineCore.post_step": steps}
        text += "# TYPE dspark_hook_us_total counter\n" + "".join(
            f'dspark_hook_us_total{{method="{method}"}} {value}.0\n' for method, value in by_method.items()
        )
        return text + f"# TYPE dspark_step_fixed_us gauge\ndspark_step_fixed_us {fixed_us}.0\n"

    pages = [page(100, 10, 900), page(300, 160, 700)]
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=pages.pop(0)))
    real_get = httpx.get
    try:
        httpx.get = lambda url, **kw: httpx.Client(transport=transport).get(url, **kw)  # type: ignore[assignment]
        before, after = server_metrics.scrape("http://s.example"), server_metrics.scrape("http://s.example")
    finally:
        httpx.get = real_get  # type: ignore[assignment]
    out = server_metrics.delta(before, after)
    assert out["dspark_engine_steps"] == 200 and out["dspark_plain_steps"] == 150
    assert out["dspark_step_fixed_us"] == 700  # what the gate measured by the level's end, not 700 - 900
    assert out["plain_step_share"] == 0.75 and out["drafter_step_share"] == 0.25
    assert out["engine_hook_us_per_step"] == 3.0 and "worker_hook_us_per_step" not in out  # the patch's Python a step
    assert out["dspark_hook_us:Scheduler.update_from_output"] == 400 and out["dspark_hook_us:EngineCore.post_step"] == 200
    assert out["hook_us_per_step:Scheduler.update_from_output"] == 2.0  # ... and where it went, each method apart


def test_metrics_that_are_not_prometheus_text_are_left_out(capsys):
    import httpx

    from dspark_bench.loadtests import server_metrics

    pages = {"/metrics": "<html><body>gateway</body></html>"}
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=pages[request.url.path]))
    real_get = httpx.get
    try:
        httpx.get = lambda url, **kw: httpx.Client(transport=transport).get(url, **kw)  # type: ignore[assignment]
        assert server_metrics.scrape("http://gw.example") is None
        assert server_metrics.scrape("http://gw.example") is None
        pages["/metrics"] = '{"json": true}'
        assert server_metrics.scrape("http://gw2.example") is None
    finally:
        httpx.get = real_get  # type: ignore[assignment]
    printed = capsys.readouterr().out
    assert printed.count("http://gw.example/metrics is not Prometheus text") == 1  # said once per server


def test_goodput_counts_valid_answers_within_every_slo_and_itl_pools_chunk_gaps():
    fast = rec(0.0, 0.1, 1.0, 10)  # TTFT 100 ms, TPOT 100 ms, E2E 1000 ms
    slow_start = rec(0.0, 0.6, 2.0, 21)  # TTFT 600 ms
    invalid = rec(1.0, 0.1, 3.0, 30, verdict="schema_violation")  # ends at 4.0: wall 4 s
    fast.itl_ms, slow_start.itl_ms = [10.0, 30.0], [20.0]
    records = [fast, slow_start, invalid]
    assert level_metrics(records).good_requests == 2  # no SLO: every valid answer is good
    m = level_metrics(records, {"ttft_ms": 500, "e2e_ms": 1500})
    assert m.good_requests == 1 and m.goodput_req_s == pytest.approx(1 / 4.0) and m.good_tok_s == pytest.approx(10 / 4.0)
    assert level_metrics(records, {"tpot_ms": 95}).good_requests == 1  # 100 ms > 95; 1.4 s / 20 = 70 ms passes
    assert m.itl_mean_ms == pytest.approx(20.0) and m.itl_p50_ms == pytest.approx(20.0)


def test_chunk_times_give_one_gap_per_chunk():
    from dspark_bench.loadtests.openai_api import consume_sse

    clock = iter([1.0, 1.010, 1.030, 1.031, 1.032])
    lines = [
        'data: {"choices": [{"delta": {"content": "{\\"a\\""}}]}',
        'data: {"choices": [{"delta": {"content": ": 1, \\"b\\": 2"}}]}',  # a speculative chunk of several tokens
        'data: {"choices": [{"delta": {"content": "}"}, "finish_reason": "stop"}]}',
        'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}}',
        "data: [DONE]",
    ]
    result = consume_sse(lines, lambda: next(clock))
    assert result.chunk_times == [1.0, 1.010, 1.030]


def test_an_open_loop_is_held_to_its_own_schedule_not_the_nominal_rate():
    """A seeded Poisson schedule of 32 requests at 2/s really asks for ~1.6/s: a client that sends each
    request when due is a valid level; one that falls behind its schedule is not."""
    from dspark_bench.loadtests.metrics import level_problems
    from dspark_bench.loadtests.plan import Arrivals

    due = Arrivals(2.0, poisson=True, seed=2000).offsets(32)

    def level(lag_per_request: float):
        records = [rec(t + i * lag_per_request, 0.05, 0.3, 10) for i, t in enumerate(due)]
        for r, t in zip(records, due, strict=True):
            r.t_scheduled = t
        return level_metrics(records)

    on_time, late = level(0.0), level(0.2)
    assert on_time.scheduled_rate < 1.6  # the schedule itself asks for less than 2/s
    assert level_problems(2.0, on_time.achieved_rate, 0.1, 2.0) != []  # held to the nominal rate: a false alarm
    assert level_problems(2.0, on_time.achieved_rate, 0.1, on_time.scheduled_rate) == []
    assert "achieved rate" in level_problems(2.0, late.achieved_rate, 0.1, late.scheduled_rate)[0]


def test_a_late_first_send_does_not_read_as_a_rate_above_the_schedule():
    """The span of an open loop starts when its first request was due: a client that sent the first one
    late (still spawning users) and the rest on time kept its schedule, and did not beat it."""
    due = [i / 40 for i in range(120)]
    records = [rec(t + (0.6 if i == 0 else 0.0), 0.05, 0.2, 10) for i, t in enumerate(due)]
    for r, t in zip(records, due, strict=True):
        r.t_scheduled = t
    metrics = level_metrics(records)
    assert metrics.scheduled_rate == pytest.approx(40.0)
    assert metrics.achieved_rate == pytest.approx(40.0)


def test_progress_counts_only_measured_answers_as_not_valid():
    import time

    from dspark_bench.loadtests.openai_api import RequestSettings
    from dspark_bench.loadtests.plan import LevelPlan
    from dspark_bench.loadtests.records import DiscardingSink
    from dspark_bench.loadtests.sweep import _progress
    from dspark_bench.scenarios import Mode, Split, load_scenario

    samples = list(load_scenario("order_extraction").samples(Split.EVAL, 4))
    plan = LevelPlan("a", 2, RequestSettings("m", Mode.JSON_OBJECT), samples, DiscardingSink(), 2)
    plan.complete(rec(0.0, 0.1, 1.0, 10))
    plan.complete(rec(0.5, 0.1, 1.0, 10, verdict="http_error", warmup=True))  # a tail, cancelled at the level's end
    assert "0 not valid" in _progress(plan, time.time() - 1)
    plan.complete(rec(1.0, 0.1, 1.0, 10, verdict="parse_error"))
    assert "1 not valid" in _progress(plan, time.time() - 1)
    assert "not valid" not in _progress(plan, time.time() - 1, cost_only=True)  # dummy weights: no validity to report


def _streamed(t_send, ttft, gaps_ms):
    record = rec(t_send, ttft, ttft + sum(gaps_ms) / 1000.0, len(gaps_ms) + 1)
    record.itl_ms = list(gaps_ms)
    return record


def test_longest_silence_is_time_no_streaming_answer_received_anything():
    from dspark_bench.loadtests.metrics import longest_silence_s

    assert longest_silence_s([rec(0.0, None, 0.5, None, verdict="http_error")]) is None
    # two answers streaming side by side every 10 ms, both silent from 0.5 s to 2.5 s
    steady = [10.0] * 40
    paused = [_streamed(0.0, 0.1, steady + [2010.0] + steady), _streamed(0.005, 0.1, steady + [2000.0] + steady)]
    assert longest_silence_s(paused) == pytest.approx(2.0, abs=0.011)
    # one answer pausing while the other streams is no silence; nor is the time between answers
    apart = [_streamed(0.0, 0.1, steady + [2000.0]), _streamed(0.0, 0.1, [10.0] * 250), _streamed(10.0, 0.1, steady)]
    assert longest_silence_s(apart) == pytest.approx(0.01, abs=0.006)
    assert level_metrics(paused).longest_silence_ms == pytest.approx(2000.0, abs=11.0)


def test_what_ended_a_silence_tells_an_engine_pause_from_chunks_held_on_their_way():
    """After the engine's own pause each answer gets about a chunk per step; chunks the engine made while the API
    server or the load generator did not read arrive together (session 51: 0.6 s held at 8 users, 32 per answer)."""
    from dspark_bench.loadtests.metrics import pause_problems, silence_flush

    steady = [10.0] * 40
    engine_paused = [_streamed(0.0, 0.1, steady + [2010.0] + steady), _streamed(0.005, 0.1, steady + [2000.0] + steady)]
    held = [_streamed(0.0, 0.1, steady + [2010.0] + [0.1] * 40), _streamed(0.005, 0.1, steady + [2000.0] + [0.1] * 40)]
    assert silence_flush(engine_paused) == pytest.approx(1.0) and silence_flush(held) > 30
    assert silence_flush([rec(0.0, None, 0.5, None, verdict="http_error")]) is None
    paused, = pause_problems(2000.0, 20.0, silence_flush(engine_paused))
    held_back, = pause_problems(2000.0, 20.0, level_metrics(held).silence_flush)
    assert paused.startswith("the server paused") and held_back.startswith("the answers were held") and "42 chunks per answer" in held_back
    assert pause_problems(500.0, 20.0, 41.0) == []  # within the limit, whatever ended it
