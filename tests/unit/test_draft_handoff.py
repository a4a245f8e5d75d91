"""A step's drafts ride back with its output (``draft_handoff``): the engine core hands on exactly what the
worker's ``take_draft_token_ids`` gives, and asks the worker itself wherever an output came without them."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest

from dspark_serve.draft_handoff import CARRIED, NOT_CARRIED, Handoff, carry
from dspark_serve.state import EngineCounters, read_counters


def _engine(**overrides):
    handed: list = []
    engine = SimpleNamespace(async_scheduling=False, batch_queue=None, check_for_draft_tokens=True,
                             scheduler=SimpleNamespace(update_draft_token_ids=handed.append))  # fmt: skip
    for name, value in overrides.items():
        setattr(engine, name, value)
    return engine, handed


def test_drafts_on_vllms_output_survive_the_trip_between_processes():
    pytest.importorskip("vllm")
    from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, DraftTokenIds, ModelRunnerOutput

    drafts = DraftTokenIds(["a", "b"], [[5, 6], []])
    output = carry(
        ModelRunnerOutput(req_ids=["a", "b"], req_id_to_index={"a": 0, "b": 1}),
        lambda: drafts,
        ModelRunnerOutput,
        EMPTY_MODEL_RUNNER_OUTPUT,
    )
    arrived = pickle.loads(pickle.dumps(output, protocol=pickle.HIGHEST_PROTOCOL))  # as vLLM's message queue sends it
    assert getattr(arrived, CARRIED) == drafts
    carry(EMPTY_MODEL_RUNNER_OUTPUT, lambda: drafts, ModelRunnerOutput, EMPTY_MODEL_RUNNER_OUTPUT)
    assert not hasattr(EMPTY_MODEL_RUNNER_OUTPUT, CARRIED)  # one object shared by every empty step: never marked


def test_carried_drafts_are_handed_on_without_asking_the_worker(tmp_path):
    counters = EngineCounters(tmp_path / "engine-1.counters")
    handoff, asked = Handoff(counters), []
    engine, handed = _engine()
    drafts = object()
    handoff.arrived(SimpleNamespace(**{CARRIED: drafts}))
    handoff.post_step(engine, True, lambda e, executed: asked.append(executed))
    assert handed == [drafts] and asked == []
    # the next step's output brought none (an empty step): the engine core asks, as vLLM does
    handoff.arrived(SimpleNamespace())
    handoff.post_step(engine, True, lambda e, executed: asked.append(executed))
    assert handed == [drafts] and asked == [True]
    # carried, but nothing to hand on (the worker had no drafts): vLLM's own post_step would do nothing either
    handoff.arrived(SimpleNamespace(**{CARRIED: None}))
    handoff.post_step(engine, True, lambda e, executed: asked.append(executed))
    assert handed == [drafts] and asked == [True] and handoff.drafts is NOT_CARRIED
    counted = read_counters(tmp_path)
    assert counted["carried_draft_steps"] == 2 and counted["fetched_draft_steps"] == 1


@pytest.mark.parametrize(
    "overrides", [{"async_scheduling": True}, {"batch_queue": ["a batch"]}, {"check_for_draft_tokens": False}]
)
def test_other_engine_paths_keep_vllms_own_post_step(overrides):
    handoff, asked = Handoff(), []
    engine, handed = _engine(**overrides)
    handoff.arrived(SimpleNamespace(**{CARRIED: object()}))
    handoff.post_step(engine, True, lambda e, executed: asked.append(executed))
    assert handed == [] and asked == [True]


def test_drafts_of_a_step_are_never_handed_on_twice():
    handoff, asked = Handoff(), []
    engine, handed = _engine()
    handoff.arrived(SimpleNamespace(**{CARRIED: "drafts"}))
    handoff.post_step(engine, True, lambda e, executed: asked.append(executed))
    handoff.post_step(engine, False, lambda e, executed: asked.append(executed))  # a step that ran no model
    assert handed == ["drafts"] and asked == [False]
