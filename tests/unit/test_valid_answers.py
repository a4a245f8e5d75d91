"""The valid answers' own speed: paired by prompt, only where both arms answered validly."""

import math

from studies.valid_answers import summary


def _record(arm, request_id, seconds, verdict="valid", finish="stop"):
    return {"arm": arm, "level": 1, "request_id": request_id, "t_send": 0.0, "t_last_byte": seconds, "verdict": verdict, "finish_reason": finish}


def test_only_prompts_valid_in_both_arms_are_paired_and_cut_answers_are_timed_apart():
    records = [
        _record("stock", "a", 2.0), _record("dspark", "a", 1.0),  # twice as fast
        _record("stock", "b", 1.0), _record("dspark", "b", 2.0),  # half as fast
        _record("stock", "c", 4.0), _record("dspark", "c", 4.0),
        _record("stock", "loop", 8.0, "truncated", "length"), _record("dspark", "loop", 1.0, "truncated", "length"),
    ]  # fmt: skip
    (line,) = summary(records, "stock")
    assert "3 answers valid in both" in line and f"{math.exp(0.0):.2f}x" in line  # 2x, 0.5x and 1x: no faster per answer
    assert "stock 53%" in line and "dspark 12%" in line  # 8 of 15 s against 1 of 8 s on the cut answer
