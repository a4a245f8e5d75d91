"""The article's table: the summary's span-based throughputs and paired ratios, intervals around them."""

import json

from dspark_bench.reports.article import article_table, load_records
from tests.made_results import made_run


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
    valid = {"baseline": 3800, "dspark": 4000}
    p95_ms = {"baseline": 1200.0, "dspark": 300.0}  # the records' latencies: 1.0, 1.1 and 1.2 times the arm's
    levels = [
        {"arm": arm, "scenario": "s", "level": level, "repeat": 0,
         "metrics": {"wall_s": walls[arm] / level, "effective_tok_s": valid[arm] * level / walls[arm], "latency_p95_ms": p95_ms[arm]}}  # fmt: skip
        for arm in walls
        for level in (1, 8)
    ]
    return made_run(levels)


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


def _write_repeats(tmp_path, dspark_latency_by_repeat):
    """Three repeats; baseline steady, dspark's latency per repeat as given (drift between repeats)."""
    rows, levels = [], []
    for arm, latencies in (("baseline", [1.0, 1.0, 1.0]), ("dspark", dspark_latency_by_repeat)):
        for repeat, latency in enumerate(latencies):
            for i in range(30):
                rows.append({"arm": arm, "level": 1, "scenario": "s", "warmup": False, "repeat": repeat, "t_send": 0.0,
                             "t_last_byte": latency * (1 + 0.05 * (i % 3)), "output_tokens": 100, "verdict": "valid"})  # fmt: skip
            wall = 30 * latency * 1.05
            levels.append({"arm": arm, "scenario": "s", "level": 1, "repeat": repeat, "metrics": {"wall_s": wall, "effective_tok_s": 3000 / wall}})
    (tmp_path / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return made_run(levels)


def _interval(table):
    cell = table.loc["effective JSON throughput (tok/s), concurrency 1"]["change (95% CI)"]
    return tuple(float(v) for v in cell.split("(")[1].rstrip(")").split("-"))


def test_repeats_do_not_inflate_throughput_and_drift_widens_the_interval(tmp_path):
    steady = _write_repeats(tmp_path, [0.5, 0.5, 0.5])
    table = article_table(load_records(tmp_path), steady, "s").set_index("metric")
    # each repeat: 30 x 100 tokens over its own wall time (31.5 s for baseline), not all 90 answers over one repeat's
    assert table.loc["effective JSON throughput (tok/s), concurrency 1"]["baseline"] == round(3000 / 31.5, 2)
    narrow = _interval(table)
    drifting = _write_repeats(tmp_path, [0.4, 0.5, 0.7])
    wide = _interval(article_table(load_records(tmp_path), drifting, "s").set_index("metric"))
    assert wide[1] - wide[0] > 3 * (narrow[1] - narrow[0])
    assert wide[0] < 1.6 and wide[1] > 1 / 0.5  # reaches toward the slow repeat (1.43x), covers the middle one (2.0x)
