"""studies.ratios: a run made before the pause check gets its paused levels out of the ratios."""

import json

import pandas as pd

from studies.ratios import with_pauses


def _streamed(arm, repeat, start, gaps_ms):
    first = start + 0.1
    return {"arm": arm, "scenario": "s", "mode": "json_object", "level": 8, "repeat": repeat, "request_id": f"{arm}{repeat}{start}",
            "t_send": start, "t_first_token": first, "t_last_byte": first + sum(gaps_ms) / 1000.0, "output_tokens": len(gaps_ms) + 1,
            "itl_ms": gaps_ms, "verdict": "valid"}  # fmt: skip


def test_a_level_whose_server_paused_is_not_valid_for_runs_before_the_check(tmp_path):
    steady = [10.0] * 200  # the pause is under 1% of the gaps: it stays out of the P99
    records = [_streamed("stock", 0, 0.0, steady + [3000.0] + steady), _streamed("stock", 0, 0.0, steady + [3000.0] + steady),
               _streamed("stock", 1, 0.0, steady * 2), _streamed("dspark", 0, 0.0, steady * 2)]  # fmt: skip
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    frame = pd.DataFrame([{"arm": a, "scenario": "s", "level": 8.0, "repeat": r, "valid": True} for a, r in (("stock", 0), ("stock", 1), ("dspark", 0))])
    marked = with_pauses(frame, tmp_path)
    assert marked["valid"].tolist() == [False, True, True]  # the 3-s silence of stock's repeat 0
    checked = frame.assign(longest_silence_ms=[3000.0, 400.0, 400.0])  # a run that holds the check keeps its own health
    assert with_pauses(checked, tmp_path)["valid"].tolist() == [True, True, True]
