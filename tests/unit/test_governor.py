"""The governor: speculation stays on only in the batch sizes where measured tokens per second say it is faster."""

from __future__ import annotations

import pytest

from dspark_serve.governor import EPOCH_STEPS, EXPLORE_STEPS, LONGEST_GAP, Governor, size_class
from dspark_serve.speculation_gate import SpeculationGate


def _serve(
    governor: Governor, batch: int, steps: int, step_seconds: dict[bool, float], tokens_per_request: dict[bool, float]
) -> list[bool]:
    """Run ``steps`` steps of ``batch`` requests, each mode with its own step time and tokens per request."""
    modes = []
    for _ in range(steps):
        mode = governor.speculate(batch)
        settled = not governor.settling
        governor.finished(batch, mode, int(tokens_per_request[mode] * batch), step_seconds[mode], settled)
        modes.append(mode)
    return modes


@pytest.mark.parametrize("speculation_wins", [True, False])
def test_the_faster_mode_serves_most_steps(speculation_wins):
    governor = Governor()
    # Speculating: 3 tokens a step at 1.5x the step time (2x the speed), or 1.1 tokens at 2x (0.55x).
    tokens = {True: 3.0 if speculation_wins else 1.1, False: 1.0}
    seconds = {True: 0.015 if speculation_wins else 0.02, False: 0.01}
    modes = _serve(governor, 8, 200 * EPOCH_STEPS, seconds, tokens)
    later = modes[20 * EPOCH_STEPS :]
    share = sum(m == speculation_wins for m in later) / len(later)
    assert share > 1 - 1.5 / LONGEST_GAP  # the loser only runs in exploring epochs, which grow rare
    assert governor.chosen(size_class(8)) is speculation_wins


def test_each_batch_size_class_chooses_for_itself():
    governor = Governor()
    _serve(governor, 1, 40 * EPOCH_STEPS, {True: 0.01, False: 0.01}, {True: 3.0, False: 1.0})
    _serve(governor, 64, 40 * EPOCH_STEPS, {True: 0.03, False: 0.01}, {True: 1.5, False: 1.0})
    assert governor.chosen(size_class(1)) is True
    assert governor.chosen(size_class(64)) is False


def test_a_workload_that_turns_is_followed():
    """Drafts that stop landing turn speculation off; drafts that land again turn it back on."""
    governor = Governor()
    _serve(governor, 4, 40 * EPOCH_STEPS, {True: 0.01, False: 0.01}, {True: 3.0, False: 1.0})
    assert governor.chosen(size_class(4)) is True
    _serve(governor, 4, 80 * EPOCH_STEPS, {True: 0.02, False: 0.01}, {True: 1.0, False: 1.0})
    assert governor.chosen(size_class(4)) is False
    _serve(governor, 4, 80 * EPOCH_STEPS, {True: 0.01, False: 0.01}, {True: 3.0, False: 1.0})
    assert governor.chosen(size_class(4)) is True


def test_steps_across_a_switch_are_not_counted_to_the_wrong_mode():
    governor = Governor()
    governor.speculate(8)
    governor.finished(8, False, 10_000, 0.001)  # a plain step still in flight after the switch to speculating
    assert governor.epoch_speeds == {}


def test_a_batch_that_flips_between_classes_explores_no_more_than_a_steady_one():
    """A closed loop of 8 users runs 8 requests, and 7 for a step each time an answer ends (it travels back
    before the user sends the next). Answers end 9 times as often when speculation writes 9 tokens a step, so
    epochs cut at every flip would make the speculating ones short and the plain ones long: plain steps would
    take a share far above one epoch in ``gap``."""
    seconds, tokens = {True: 0.03, False: 0.01}, {True: 9.0, False: 1.0}  # speculating: 3x the speed
    answer_tokens = 100
    steady, churning = Governor(), Governor()
    steady_modes = _serve(steady, 8, 100 * EPOCH_STEPS, seconds, tokens)
    churning_modes: list[bool] = []
    written = 0.0
    while len(churning_modes) < 100 * EPOCH_STEPS:
        ended = written >= answer_tokens / 8  # 8 answers in flight: one ends every answer_tokens / 8 tokens each
        written = 0.0 if ended else written
        mode = _serve(churning, 7 if ended else 8, 1, seconds, tokens)[0]
        written += tokens[mode]
        churning_modes.append(mode)
    plain = [modes.count(False) / len(modes) for modes in (steady_modes, churning_modes)]
    assert plain[1] <= plain[0] + 0.02 and plain[1] < 0.1, plain
    assert churning.chosen(size_class(8))


def test_a_fresh_class_speculates_first_and_explores_plain_steps_later():
    governor = Governor()
    modes = _serve(governor, 8, 3 * EPOCH_STEPS, {True: 0.03, False: 0.01}, {True: 9.0, False: 1.0})
    assert all(modes)  # FIRST_GAP epochs of speculation before the first plain one
    explored = _serve(governor, 8, EPOCH_STEPS, {True: 0.03, False: 0.01}, {True: 9.0, False: 1.0})
    assert explored == [False] * EXPLORE_STEPS + [True] * (EPOCH_STEPS - EXPLORE_STEPS)  # a short exploration


def test_the_gate_does_not_draft_in_a_plain_epoch():
    """Where the governor chose plain steps, the worker drafts after none of them, probes included."""
    governor = Governor()
    gate = SpeculationGate(governor=governor)
    running = [f"r{i}" for i in range(8)]
    drafted = []
    for _ in range(6 * EPOCH_STEPS):
        longest, live = gate.plan_step(running, 12)
        gate.step_started(8)
        drafted.append((gate.speculating, longest))
        gate.step_finished(8 * (3 if gate.speculating else 1))  # timing is wall time; tokens favour speculating
    assert any(not speculating for speculating, _ in drafted)  # plain epochs were measured
    assert all(longest == 0 for speculating, longest in drafted if not speculating)
    assert any(longest > 0 for speculating, longest in drafted if speculating)


def test_a_plain_epoch_keeps_the_context_of_requests_that_would_draft():
    """Requests that arrive while the governor runs plain steps have their context kept, so they draft from a
    whole one when speculation resumes (with gaps in it they miss, go dormant, and decode a token a step)."""
    governor = Governor()
    gate = SpeculationGate(governor=governor)
    governor.mode, governor.epoch_class = False, size_class(8)  # a plain epoch under way
    governor.since_explored[size_class(8)] = 0
    running = [f"r{i}" for i in range(8)]
    gate.plan_step(running, 12)
    running = [*running[1:], "arrived-in-a-plain-epoch"]  # one answer done, the next request in
    longest, live = gate.plan_step(running, 12)
    assert not gate.speculating and longest == 0  # no drafter pass in a plain epoch
    assert live == running  # every request's context is kept, the new one's too
