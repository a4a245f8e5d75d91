"""Speculate only while it is faster, measured end to end: tokens per second, with and without speculation.

The speculation gate (``speculation_gate``) weighs each request's drafts against a model of the step's cost.
A model can be wrong where costs overlap or hide: vLLM's asynchronous scheduling runs the engine core
while the GPU computes, CUDA graphs make a step's cost depend on its padded shape, and speculation changes
what runs besides the drafter (the rejection sampler, the grammar bitmask's extra rows). So above the gate,
the governor measures the quantity users pay for, per batch size class (powers of two): the tokens each
running request gets per second of wall time, with speculation allowed (the gate decides) and with it off
(no drafter pass, no drafts verified: stock vLLM's step, ``no_draft_step``).

Steps run in *epochs* of ``EPOCH_STEPS`` steps of one mode, chosen by the class of the batch the epoch
starts with; each finished step counts towards its own class. A closed loop's batch flips between classes
every few steps (8 users are 7 running while one answer travels back), so an epoch ends early only where
the batch moves to a class whose choice is the other mode: epochs of both modes are equally long, whatever
the churn. Speculation is each class's first choice; the other mode is explored for ``EXPLORE_STEPS`` steps
one epoch in ``gap``, from ``FIRST_GAP`` epochs on, and the gap doubles each time exploring confirms the choice by more than
``CLEAR_MARGIN``, up to ``LONGEST_GAP``: a workload where speculation clearly loses pays for one epoch in
``LONGEST_GAP + 1`` at most, and one whose drafts start to land again is found within that many epochs.

Pure: the caller says when a step was planned and when it finished; nothing here imports vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EPOCH_STEPS = 48  # steps per epoch of one mode: long enough to average the batch's churn
EXPLORE_STEPS = 16  # steps of an epoch that explores the other mode: every request in flight pays for them
SETTLE_STEPS = 3  # first steps of an epoch left out: after a switch, the first speculative step has no drafts yet
FIRST_GAP, LONGEST_GAP = 3, 32  # epochs of the chosen mode before, and between, two of the other one
CLEAR_MARGIN = 0.1  # exploring confirms the choice when the other mode is this much slower
DECAY = 0.7  # weight of an epoch one epoch older in a mode's speed


def size_class(batch: int) -> int:
    """1, 2-3, 4-7, 8-15, ...: batches whose steps cost alike, a class each."""
    return max(int(batch), 1).bit_length()


@dataclass
class ModeSpeed:
    """Per-request tokens per second of one mode in one size class, over epochs, older ones decayed."""

    tokens: float = 0.0  # sum over steps of tokens / requests in the step
    seconds: float = 0.0
    epochs: int = 0

    def add(self, tokens: float, seconds: float) -> None:
        self.tokens = DECAY * self.tokens + tokens
        self.seconds = DECAY * self.seconds + seconds
        self.epochs += 1

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Governor:
    """Which mode each step runs in: ``speculate`` per planned step, ``finished`` per finished step."""

    speeds: dict[tuple[int, bool], ModeSpeed] = field(default_factory=dict)
    gaps: dict[int, int] = field(default_factory=dict)  # per size class: epochs of the chosen mode between explorations
    since_explored: dict[int, int] = field(default_factory=dict)
    mode: bool = True  # this epoch's: speculation allowed
    exploring: bool = False  # this epoch runs the mode that is not its class's choice
    epoch_class: int = 0  # the class of the batch the epoch started with (0: none yet)
    epoch_step: int = 0
    # per size class, of this epoch's settled steps in its mode: [tokens per request, seconds]
    epoch_speeds: dict[int, list[float]] = field(default_factory=dict)
    switches: int = 0

    def chosen(self, size: int) -> bool:
        """The faster mode of a size class; speculation until both have been measured."""
        on, off = self.speeds.get((size, True)), self.speeds.get((size, False))
        if on is None or off is None or on.epochs == 0 or off.epochs == 0:
            return True
        return on.rate >= off.rate

    def speculate(self, batch: int) -> bool:
        """The mode of the step being planned, for a batch of ``batch`` running requests."""
        size = size_class(batch)
        moved = size != self.epoch_class and not self.exploring and self.chosen(size) != self.mode
        if self.epoch_class == 0 or self.epoch_step >= (EXPLORE_STEPS if self.exploring else EPOCH_STEPS) or moved:
            self._next_epoch(size)
        self.epoch_step += 1
        return self.mode

    def finished(self, batch: int, speculated: bool, tokens: int, seconds: float, settled: bool = True) -> None:
        """A step of ``batch`` requests, planned in mode ``speculated``, wrote ``tokens`` in ``seconds``.
        ``settled``: not among its epoch's first steps. Steps of another mode than the epoch's (in flight
        across a switch) are left out."""
        if batch <= 0 or seconds <= 0 or not settled or speculated != self.mode:
            return
        speed = self.epoch_speeds.setdefault(size_class(batch), [0.0, 0.0])
        speed[0] += tokens / batch
        speed[1] += seconds

    @property
    def settling(self) -> bool:
        """Whether the step just planned is among its epoch's first."""
        return self.epoch_step <= SETTLE_STEPS

    def _next_epoch(self, size: int) -> None:
        for measured, (tokens, seconds) in self.epoch_speeds.items():
            if seconds > 0:
                self.speeds.setdefault((measured, self.mode), ModeSpeed()).add(tokens, seconds)
        if self.exploring and self.epoch_class:
            self._judge_exploration(self.epoch_class)
        self.epoch_class, self.epoch_step, self.epoch_speeds = size, 0, {}
        choice = self.chosen(size)
        since = self.since_explored.get(size, 0)
        self.exploring = since >= self.gaps.get(size, FIRST_GAP)
        mode = (not choice) if self.exploring else choice
        self.since_explored[size] = 0 if self.exploring else since + 1
        if mode != self.mode:
            self.switches += 1
        self.mode = mode

    def _judge_exploration(self, size: int) -> None:
        on, off = self.speeds.get((size, True), ModeSpeed()).rate, self.speeds.get((size, False), ModeSpeed()).rate
        faster, slower = max(on, off), min(on, off)
        clear = faster > 0 and slower < (1.0 - CLEAR_MARGIN) * faster
        gap = self.gaps.get(size, FIRST_GAP)
        self.gaps[size] = min(2 * gap, LONGEST_GAP) if clear else FIRST_GAP

    def summary(self) -> dict[str, float]:
        """Per size class: each mode's measured per-request tokens per second (for /dspark/status)."""
        said: dict[str, float] = {}
        for (size, mode), speed in sorted(self.speeds.items()):
            low = 1 << (size - 1)
            said[f"batch_{low}_{2 * low - 1}_{'speculating' if mode else 'plain'}_tok_s"] = round(speed.rate, 1)
        return said
