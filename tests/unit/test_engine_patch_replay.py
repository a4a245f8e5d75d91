"""The replay drafter (the oracle arm's): after one answer to a prompt it drafts that answer exactly,
under the same load-aware length as the other drafters, and nothing for a context it has not seen."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from dspark_serve.drafter import draft_length
from dspark_serve.replay import CONTEXT, ReplayDrafter


def _drafter(k: int = 6) -> ReplayDrafter:
    config = SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=k), model_config=SimpleNamespace(max_model_len=1024)
    )
    return ReplayDrafter(config)


def _generate(drafter: ReplayDrafter, prompt: list[int], answer: list[int], batch: int = 1) -> list[list[int]]:
    """Feed ``answer`` to the drafter one accepted token per step, as vLLM does; the drafts it made."""
    rows = np.zeros((batch, 256), dtype=np.int32)
    drafts = []
    tokens = list(prompt)
    for token in answer:
        tokens.append(token)
        rows[0, : len(tokens)] = tokens
        sampled = [[token]] + [[7]] * (batch - 1)
        lengths = np.array([len(tokens)] + [CONTEXT + 1] * (batch - 1))
        drafts.append(drafter.propose(sampled, lengths, rows)[0])
    return drafts


def test_a_second_answer_to_the_same_prompt_is_drafted_whole():
    prompt, answer = list(range(100, 130)), [5, 9, 9, 4, 1, 2, 3, 8, 8, 6]
    drafter = _drafter(k=6)
    assert all(d == [] for d in _generate(drafter, prompt, answer))  # first time: nothing to replay
    drafts = _generate(drafter, prompt, answer)
    assert drafts[0] == answer[1:7]  # after the first token, the next six
    assert all(d == answer[i + 1 : i + 7] for i, d in enumerate(drafts))


def test_another_prompt_gets_no_draft():
    drafter = _drafter()
    _generate(drafter, list(range(100, 130)), [5, 9, 9, 4])
    assert all(d == [] for d in _generate(drafter, list(range(200, 230)), [5, 9, 9, 4]))


def test_drafts_shrink_with_the_batch_like_the_other_drafters():
    prompt, answer = list(range(100, 130)), list(range(1, 30))
    drafter = _drafter(k=12)
    _generate(drafter, prompt, answer)
    for batch in (1, 8, 40):
        assert len(_generate(drafter, prompt, answer, batch)[0]) == draft_length(12, batch)
