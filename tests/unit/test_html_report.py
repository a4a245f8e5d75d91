"""The HTML page: self-contained, model output escaped, invalid answers listed by category."""

import json
import re

from dspark_bench.reports import render_html
from tests.made_results import made_run


def test_page_is_offline_and_escapes_model_output(tmp_path):
    hostile = '<script>alert(1)</script>{"a":'
    rows = [
        {"arm": "baseline", "level": 1, "scenario": "s", "warmup": False, "t_send": 0.0, "t_last_byte": 1.0,
         "output_tokens": 10, "verdict": verdict, "request_id": f"r{i}", "detail": "Expecting value", "error": None,
         "output": hostile if verdict == "parse_error" else "{}"}
        for i, verdict in enumerate(["valid", "parse_error", "parse_error"])
    ]  # fmt: skip
    (tmp_path / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    metrics = {"effective_tok_s": 3.0, "latency_p95_ms": 1000.0, "invalid_json_rate": 2 / 3, "wall_s": 3.0}
    results = made_run(
        [{"arm": "baseline", "scenario": "s", "mode": "prompt", "level": 1, "repeat": 0, "metrics": metrics}],
        config={"model": "m", "scenarios": ["s"]},
        arms={"baseline": {"base_url": "http://h", "model": "m", "argv": ["vllm", "serve", "<m>"], "mode": "prompt"}},
    )
    page = render_html(results, tmp_path / "report.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "parse_error: 2 answer(s)" in page and "&lt;m&gt;" in page
    # nothing is fetched from the network: no external src/href
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)


def test_two_runs_side_by_side(tmp_path):
    from dspark_bench.reports.html import comparison_frame, render_comparison

    def run(eff, p95):
        metrics = {"effective_tok_s": eff, "latency_p95_ms": p95, "invalid_json_rate": 0.0}
        return made_run([{"arm": "dspark", "scenario": "s", "mode": "m", "level": 1, "repeat": 0, "metrics": metrics}])

    table = comparison_frame(run(100.0, 500.0), run(150.0, 400.0))
    assert list(table["eff tok/s change"].round(3)) == [0.5] and list(table["P95 change"].round(3)) == [-0.2]
    page = render_comparison(run(100.0, 500.0), run(150.0, 400.0), ("v1", "v2"), tmp_path / "c.html").read_text()
    assert "+50.0%" in page and "-20.0%" in page and "v1 &rarr; v2" in page
