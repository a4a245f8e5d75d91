"""The structure drafter's pieces, on token sequences written by hand."""

import numpy as np

from engine_patch.drafter import StructureMemory, copy_candidates, draft_length, propose_one


def test_copy_takes_what_followed_the_longest_earlier_match():
    tokens = np.array([7, 1, 2, 3, 40, 41, 42, 9, 1, 2, 3], dtype=np.int32)
    assert copy_candidates(tokens, 3) == [40, 41, 42]
    assert copy_candidates(np.array([5, 6, 7], dtype=np.int32), 3) == []


def test_memory_proposes_only_continuations_it_has_seen_nearly_always():
    memory = StructureMemory(context=2)
    for value in (10, 11, 12):  # "key": <value varies> , "next"
        memory.learn(np.array([1, 2, value, 3, 4], dtype=np.int32), 2)
    assert memory.predict([1, 2]) is None  # the value varied: never guessed from memory
    memory.learn(np.array([8, 8, 3, 4], dtype=np.int32), 2)
    assert memory.predict([12, 3]) is None  # seen once only
    for value in (10, 11, 12):
        memory.learn(np.array([value, 3, 4, 5], dtype=np.int32), 2)
    assert memory.predict([3, 4]) == 5


def test_structure_wins_over_the_prompt_where_they_disagree():
    memory = StructureMemory(context=2)
    for _ in range(3):
        memory.learn(np.array([60, 61, 90, 91], dtype=np.int32), 2)  # after a value: 90 91 (',"key":')
    # prompt: ... 60 61 70 (the prompt's own text after the value) ...; output so far ends with 60 61
    tokens = np.array([5, 60, 61, 70, 71, 6, 60, 61], dtype=np.int32)
    assert propose_one(tokens, 4, memory)[:2] == [90, 91]


def test_draft_length_shrinks_with_the_batch():
    assert draft_length(8, 1, budget=64) == 8
    assert draft_length(8, 8, budget=64) == 7
    assert draft_length(8, 64, budget=64) == 0
