"""How two arms compare over the repeats of a run: the one estimator the summary, the verdict, the
article table and the gate all use.

Arms run side by side within each repeat, so each repeat gives one ratio ``b / a`` that cancels the
drift the machine had then. Ratios are averaged on the log scale (a geometric mean): 2x and 0.5x
cancel, and the interval can never go below zero. The 95% interval is Student's t on the log ratios
with the exact quantile for ``repeats - 1`` degrees of freedom; few repeats give a wide interval on
purpose (a bootstrap over three repeats would treat them as the whole population and come out too
narrow). Pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

CONFIDENCE = 0.95


def t_two_sided_cdf(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with ``df`` (a whole number >= 1) degrees of freedom, in closed form
    (Abramowitz & Stegun 26.7.3-4)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    if df % 2:  # odd: 2/pi * (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
        series, term = 0.0, 1.0
        for k in range(1, (df - 1) // 2 + 1):
            series += term
            term *= cos2 * (2 * k) / (2 * k + 1)
        return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * series)
    series, term = 0.0, 1.0  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
    for k in range(1, df // 2 + 1):
        series += term
        term *= cos2 * (2 * k - 1) / (2 * k)
    return math.sin(theta) * series


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The t such that P(|T| <= t) = ``confidence`` (the two-sided critical value), by bisection."""
    low, high = 0.0, 1.0
    while t_two_sided_cdf(high, df) < confidence:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if t_two_sided_cdf(middle, df) < confidence:
            low = middle
        else:
            high = middle
        if high - low < 1e-12:
            break
    return (low + high) / 2


def t_975(df: int) -> float:
    """Student's t 97.5th percentile (the 95% two-sided critical value) for ``df`` degrees of freedom."""
    return t_quantile(df, CONFIDENCE)


@dataclass(frozen=True)
class PairedRatio:
    """``b / a`` over the repeats both arms ran: the geometric mean of the per-repeat ratios, and its 95%
    interval (None with one repeat, or when a repeat's ratio is 0: no log-scale interval exists)."""

    ratio: float
    low: float | None
    high: float | None
    per_repeat: tuple[float, ...]  # the per-repeat ratios, in repeat order
    repeat_numbers: tuple[int, ...] = ()  # the repeats they come from

    @property
    def repeats(self) -> int:
        return len(self.per_repeat)

    def by_repeat(self) -> dict[int, float]:
        return dict(zip(self.repeat_numbers, self.per_repeat, strict=True))

    @property
    def interval(self) -> tuple[float, float] | None:
        return None if self.low is None or self.high is None else (self.low, self.high)

    @property
    def relative_half_width(self) -> float | None:
        """Half the interval's width over the ratio: 0.15 means the ratio is known to +-15%."""
        if self.interval is None or not self.ratio:
            return None
        return (self.interval[1] - self.interval[0]) / 2 / self.ratio


def paired_ratio(a: Mapping[int, float] | None, b: Mapping[int, float] | None) -> PairedRatio | None:
    """``b / a`` paired by repeat number; None when no repeat has both arms with ``a`` above zero."""
    a, b = a or {}, b or {}
    common = sorted(r for r in set(a) & set(b) if a[r] > 0 and b[r] >= 0)
    if not common:
        return None
    ratios, numbers = tuple(b[r] / a[r] for r in common), tuple(common)
    if min(ratios) == 0:
        return PairedRatio(0.0, None, None, ratios, numbers)
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / len(logs)
    if len(logs) < 2:
        return PairedRatio(math.exp(mean), None, None, ratios, numbers)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    half = t_975(len(logs) - 1) * sd / math.sqrt(len(logs))
    return PairedRatio(math.exp(mean), math.exp(mean - half), math.exp(mean + half), ratios, numbers)
