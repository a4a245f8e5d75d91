"""The article's table from per-request records: ratios from wall time, intervals around them."""

import json

from dspark_bench.reports.article import article_table, load_records


def _write_run(tmp_path):
    rows = []
    for arm, latency, tokens, bad in (("baseline", 1.0, 100, 2), ("dspark", 0.25, 100, 0)):
        for level in (1, 8):
            for i in range(40):
                verdict = "parse_error" if i < bad else "valid"
                rows.append(
                    {
                        "arm": arm, "level": level, "scenario": "s", "warmup": False, "t_send": 0.0,
                        "t_last_byte": latency * (1 + 0.1 * (i % 3)), "output_tokens": tokens, "verdict": verdict,
                    }
                )  # fmt: skip
    (tmp_path / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    walls = {"baseline": 44.0, "dspark": 11.0}
    levels = [
        {"arm": arm, "scenario": "s", "level": level, "repeat": 0, "metrics": {"wall_s": walls[arm] / level}}
        for arm in walls
        for level in (1, 8)
    ]
    return {"levels": levels}


def test_rows_ratios_and_invalid_rates(tmp_path):
    results = _write_run(tmp_path)
    table = article_table(load_records(tmp_path), results, "s").set_index("metric")
    eff = table.loc["effective JSON throughput (tok/s), concurrency 1"]
    # baseline: 38 valid x 100 tokens / 44 s; dspark: 40 x 100 / 11 s -> 4.21x
    assert eff["baseline"] == round(3800 / 44, 2) and eff["change (95% CI)"].startswith("4.21x (")
    low, high = (float(v) for v in eff["change (95% CI)"].split("(")[1].rstrip(")").split("-"))
    assert low <= 4.21 <= high
    assert "-75.0%" in table.loc["P95 latency (ms), concurrency 1"]["change (95% CI)"]
    assert table.loc["invalid JSON rate, all levels (truncated apart)"]["baseline"].startswith("5.00%")


def test_missing_arm_gives_no_table(tmp_path):
    results = _write_run(tmp_path)
    assert article_table(load_records(tmp_path), results, "s", treat="absent").empty
