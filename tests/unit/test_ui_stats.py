"""The web UI's JSON tab counts, and how workers' counts add up on the master."""

from dspark_bench.loadtests.ui_stats import JsonStats


def test_counts_by_verdict_and_effective_tokens_per_second():
    stats = JsonStats()
    stats.add("dspark order", "valid", 100, now=10.0)
    stats.add("dspark order", "parse_error", 80, now=11.0)
    stats.add("dspark order", "valid", 100, now=12.0)
    (row,) = stats.rows()
    assert row["requests"] == 3 and row["valid"] == 2 and row["parse_error"] == 1 and row["truncated"] == 0
    assert row["effective_tok_s"] == 100.0  # 200 valid tokens over the 2 s between first and last answer
    assert row["valid_pct"] == "66.7%"


def test_worker_reports_merge_on_the_master():
    master, worker_a, worker_b = JsonStats(), JsonStats(), JsonStats()
    worker_a.add("x", "valid", 50, now=1.0)
    worker_b.add("x", "schema_violation", 40, now=3.0)
    worker_b.add("x", "valid", 50, now=5.0)
    master.merge(worker_a.take())
    master.merge(worker_b.take())
    assert not worker_a.counts and not worker_b.counts  # each report sends only what is new
    (row,) = master.rows()
    assert row["requests"] == 3 and row["schema_violation"] == 1 and row["effective_tok_s"] == 25.0  # 100 / (5 - 1)
