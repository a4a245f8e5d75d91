"""Capacity at an SLO (``bench --find-capacity``): per arm, the highest open-loop rate at which the share
of good requests (valid, and within every SLO) stays at or above ``capacity_share``.

The search brackets, then bisects: from the first rate it doubles until a probe fails (or halves until
one passes), then probes the geometric middle of the highest passing and the lowest failing rate until
they are within ``capacity_resolution`` of each other. Each probe is one open-loop level of the sweep
(its own prompts, every prefix cache emptied first, its health checked); a probe whose load did not hold
(the client fell behind the schedule), or that missed the SLO while other work ran beside it, is run again
once (``probe_again``), and a probe whose load still did not hold stops the search there rather than being
read as the server's limit. ``next_rate`` and ``capacity`` are pure over the probes so far; ``CapacityResult`` is what a run's
results.json keeps of each search, with its loader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

MIN_RATE = 0.01  # requests per second: below this the search gives up (the arm fails its SLO at any rate)
HALVINGS = 4  # below its start the search halves at most this often (a probe at 1/16 of it lasts 16 times longer)
MAX_PROBES = 12  # doubling from 1/s reaches 64/s in 7, and bisection to 10% takes 3-4 more


@dataclass(frozen=True)
class Probe:
    """One probe: its rate, the share of its requests that were good, whether it was a measurement."""

    rate: float
    good_share: float
    passed: bool
    valid: bool = True
    problems: tuple[str, ...] = ()


def probe_again(load_problems: tuple[str, ...], noise: tuple[str, ...], passed: bool) -> bool:
    """Whether a probe runs once more: its load did not hold, or it missed the SLO while other work ran
    beside it (``noise``: a busy machine slows the server, so the miss may not be the server's). A pass
    beside other work stands: the noise only made it harder. Pure."""
    return bool(load_problems) or (bool(noise) and not passed)


@dataclass(frozen=True)
class CapacityResult:
    """One (arm, scenario)'s search as results.json keeps it: the capacity, its bracket and every probe."""

    arm: str
    scenario: str
    slo: dict[str, float]
    share: float
    resolution: float
    capacity_req_s: float | None = None
    bracket: tuple[float, float] | None = None
    resolved: bool = False
    stopped: str | None = None
    probes: tuple[Probe, ...] = ()

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CapacityResult:
        bracket = raw.get("bracket")
        return cls(
            arm=str(raw["arm"]),
            scenario=str(raw["scenario"]),
            slo={str(key): float(limit) for key, limit in (raw.get("slo") or {}).items()},
            share=float(raw["share"]),
            resolution=float(raw["resolution"]),
            capacity_req_s=raw.get("capacity_req_s"),
            bracket=(float(bracket[0]), float(bracket[1])) if bracket else None,
            resolved=bool(raw.get("resolved")),
            stopped=raw.get("stopped"),
            probes=tuple(
                Probe(float(p["rate"]), float(p["good_share"]), bool(p["passed"]), bool(p.get("valid", True)), tuple(p.get("problems") or ()))
                for p in raw.get("probes") or ()
            ),
        )


@dataclass
class CapacitySearch:
    """One arm's search: its probes so far, the next rate to try, and the capacity once bracketed."""

    start: float
    share: float  # good requests / requests that a passing probe holds
    resolution: float  # done when the lowest failing rate is within (1 + resolution) of the highest passing
    max_probes: int = MAX_PROBES
    probes: list[Probe] = field(default_factory=list)
    stopped: str | None = None  # why the search ended without bracketing the capacity

    def next_rate(self) -> float | None:
        """The rate to probe next; None when the search is done."""
        if self.stopped or len(self.probes) >= self.max_probes:
            return None
        if not self.probes:
            return self.start
        passing = [p.rate for p in self.probes if p.passed]
        failing = [p.rate for p in self.probes if not p.passed]
        if not failing:
            return max(passing) * 2
        if not passing:  # halving makes each probe twice as long: at most HALVINGS below the start
            lower = min(failing) / 2
            return lower if lower >= max(MIN_RATE, self.start / 2**HALVINGS) else None
        if self.bracket is None or self.resolved:  # resolved, or passes above a failure: nothing to bisect
            return None
        low, high = self.bracket
        return math.sqrt(low * high)

    @property
    def bracket(self) -> tuple[float, float] | None:
        """(highest passing rate below the lowest failing one, that failing rate); None until both exist."""
        failing = [p.rate for p in self.probes if not p.passed]
        if not failing:
            return None
        high = min(failing)
        below = [p.rate for p in self.probes if p.passed and p.rate < high]
        return (max(below), high) if below else None

    @property
    def capacity(self) -> float | None:
        """The highest rate that held the SLO below the lowest that did not; None if none held."""
        return self.bracket[0] if self.bracket else None

    @property
    def resolved(self) -> bool:
        """The capacity lies within the resolution: a second search should find it again."""
        return self.bracket is not None and self.bracket[1] <= self.bracket[0] * (1 + self.resolution)

    def result(self, arm: str, scenario: str, slo: dict[str, float]) -> CapacityResult:
        return CapacityResult(
            arm, scenario, dict(slo), self.share, self.resolution, self.capacity, self.bracket, self.resolved, self.stopped, tuple(self.probes)
        )
