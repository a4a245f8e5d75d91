"""The one ratio estimator: exact t quantiles, geometric means of paired per-repeat ratios, and intervals
that tell a real difference from noise."""

from __future__ import annotations

import math
import random

import pytest

from dspark_bench.reports.intervals import paired_ratio, t_975, t_two_sided_cdf

# Student's t, 97.5th percentile, from published tables (NIST/SEMATECH e-Handbook, table 1.3.6.7.2)
PUBLISHED_T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 7: 2.365, 11: 2.201, 13: 2.160, 25: 2.060, 100: 1.984}


@pytest.mark.parametrize(("df", "expected"), sorted(PUBLISHED_T_975.items()))
def test_t_975_matches_the_published_table_at_every_degree_of_freedom(df, expected):
    assert t_975(df) == pytest.approx(expected, abs=6e-4)  # 11 and 13: the old table rounded up to 12 and 15


def test_the_t_distribution_is_a_distribution():
    assert t_two_sided_cdf(0.0, 3) == 0.0
    assert t_two_sided_cdf(1e9, 4) == pytest.approx(1.0)
    assert t_two_sided_cdf(1.0, 1) == pytest.approx(0.5)  # Cauchy: P(|T| <= 1) = 1/2


def test_paired_ratio_by_hand():
    paired = paired_ratio({0: 100.0, 1: 200.0, 2: 50.0}, {0: 200.0, 1: 300.0, 2: 100.0})
    logs = [math.log(2.0), math.log(1.5), math.log(2.0)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    assert paired is not None and paired.repeats == 3
    assert paired.ratio == pytest.approx(math.exp(mean))  # the geometric mean, not the mean of ratios
    assert paired.interval == pytest.approx((math.exp(mean - 4.303 * sd / math.sqrt(3)), math.exp(mean + 4.303 * sd / math.sqrt(3))), rel=1e-3)


def test_paired_ratio_pairs_by_repeat_and_is_symmetric_on_the_log_scale():
    a, b = {0: 10.0, 1: 20.0}, {0: 20.0, 1: 10.0, 2: 99.0}  # repeat 2 has no partner
    paired = paired_ratio(a, b)
    assert paired is not None and paired.repeats == 2 and paired.ratio == pytest.approx(1.0)  # 2x and 0.5x cancel
    assert paired.interval is not None and paired.interval[0] > 0  # never below zero, whatever the spread


def test_one_repeat_gives_a_ratio_without_an_interval_and_none_gives_nothing():
    one = paired_ratio({0: 4.0}, {0: 6.0})
    assert one is not None and one.ratio == 1.5 and one.interval is None
    assert paired_ratio({0: 0.0}, {0: 1.0}) is None and paired_ratio(None, {0: 1.0}) is None
    zero = paired_ratio({0: 1.0, 1: 1.0}, {0: 0.0, 1: 1.0})
    assert zero is not None and zero.ratio == 0.0 and zero.interval is None


def _noisy_repeats(rng: random.Random, true_ratio: float, noise: float, repeats: int):
    """Per-repeat throughputs of two arms: shared drift per repeat, then each arm's own noise."""
    a, b = {}, {}
    for r in range(repeats):
        drift = rng.uniform(0.7, 1.3)  # the machine's state in that repeat, shared by both arms
        a[r] = 100.0 * drift * math.exp(rng.gauss(0, noise))
        b[r] = 100.0 * true_ratio * drift * math.exp(rng.gauss(0, noise))
    return a, b


def test_the_interval_covers_the_truth_95_times_in_100_and_tells_a_real_difference_from_noise():
    rng = random.Random(7)
    trials = 2000
    covered = sum(
        (p := paired_ratio(*_noisy_repeats(rng, 1.0, 0.05, 3))).low <= 1.0 <= p.high  # type: ignore[union-attr, operator]
        for _ in range(trials)
    )
    assert 0.93 <= covered / trials <= 0.97  # an exact t on log ratios: nominal coverage
    told_apart = sum((p := paired_ratio(*_noisy_repeats(rng, 1.3, 0.05, 3))).low > 1.0 for _ in range(trials))  # type: ignore[union-attr, operator]
    assert told_apart / trials > 0.8  # a 30% gain under 5% noise per arm is found in most runs of three repeats
