"""Repeat drafts: what followed the request's latest tokens the last time they appeared, judged by their own
acceptance, and which source's drafts a step verifies."""

from dspark_serve.engine_drafts import LEARNED, chosen, expected_landed
from dspark_serve.repeat_drafts import RepeatDrafter, SuffixIndex, continuation
from dspark_serve.state import COUNTERS, EngineCounters


def test_what_followed_the_latest_occurrence_of_the_suffix_is_drafted():
    # a value copied out of the prompt: "2026 - 08 - 26" seen once, its start written again
    prompt, answer = [50, 2026, 7, 8, 7, 26, 51], [60, 50, 2026]
    assert continuation(prompt + answer, 4) == [7, 8, 7, 26]
    # the latest occurrence wins over an earlier one
    assert continuation([1, 2, 3, 1, 2, 4, 9, 1, 2], 2) == [4, 9]
    # the longest suffix found wins over a shorter, later one
    assert continuation([5, 1, 2, 3, 8, 0, 2, 3, 9, 1, 2, 3], 1) == [8]


def test_a_loop_is_drafted_as_far_as_asked():
    newline, space = 10, 32
    loop = [7, newline, space, newline, space, newline, space]
    assert continuation(loop, 5) == [newline, space, newline, space, newline]
    assert continuation([4, 4, 4], 6) == [4] * 6


def test_nothing_is_drafted_without_an_earlier_occurrence():
    assert continuation([1, 2, 3, 4], 5) == []
    assert continuation([1, 2], 5) == []
    assert continuation([1, 2, 1, 2], 0) == []
    # one matching token is not enough: a suffix of two at least
    assert continuation([1, 9, 2, 1], 3) == []
    # the whole history is searched
    assert continuation([3, 4, 5] + [0] * 2000 + [1, 3, 4], 1) == [5]


def test_repeat_drafts_are_earned_by_what_they_would_have_landed(tmp_path):
    counters = EngineCounters(tmp_path / "engine.counters")
    drafter = RepeatDrafter(counters, verify_cost=lambda: 0.2)
    text = [9, 1, 2, 3, 1, 2]
    assert drafter.propose("r", text, 12) == []  # a new request: most answers do not repeat
    for token in [3, 1, 2, 3, 1, 2]:  # the target writes what was proposed, a token a step: the shadows land
        text.append(token)
        drafted = drafter.propose("r", text, 12)
    assert len(drafted) > 3
    drafter.verified("r", 6, 6)
    assert [counters.values[COUNTERS.index(name)] for name in ("repeat_draft_tokens", "repeat_drafts_accepted")] == [6, 6]
    for _ in range(12):  # then the target writes something else, step after step
        drafter.verified("r", 3, 0)
    assert drafter.propose("r", text, 12) == []
    drafter.forget({"other": object()})
    assert not drafter.history and not drafter.pending


def test_a_shadow_is_judged_by_what_the_target_wrote_past_it():
    drafter = RepeatDrafter(verify_cost=lambda: 0.2)
    drafter.propose("r", [1, 2, 1, 2], 4)  # proposes 1, 2, 1, 2
    drafter.judge("r", [1, 2, 1, 2])  # nothing written yet
    assert "r" in drafter.pending and "r" not in drafter.history
    drafter.judge("r", [1, 2, 1, 2, 1])  # one token, which landed: no miss seen
    assert "r" not in drafter.pending and (drafter.history["r"].accepted, drafter.history["r"].rejected) == (
        0.8 * 0.2 + 1,
        0.8 * 1.8,
    )
    drafter.propose("r", [1, 2, 1, 2, 1], 4)  # proposes 2, 1, 2, 1
    drafter.judge("r", [1, 2, 1, 2, 1, 7])  # a miss
    assert drafter.history["r"].rejected == 0.8 * 0.8 * 1.8 + 1


def test_the_source_expected_to_land_most_is_verified():
    assert expected_landed([1, 2, 3], 0.5) == 0.5 + 0.25 + 0.125
    learned, repeat = [1, 2, 3], [4, 5, 6, 7, 8]
    assert chosen([(LEARNED, learned, 0.9), ("repeat", repeat, 0.2)]) == (LEARNED, learned)
    assert chosen([(LEARNED, learned, 0.1), ("repeat", repeat, 0.9)]) == ("repeat", repeat)
    assert chosen([(LEARNED, [], 0.9), ("grammar", [4], 0.5)]) == ("grammar", [4])
    assert chosen([(LEARNED, [1], 0.5), ("repeat", [2], 0.5)]) == (LEARNED, [1])  # ties: the learned drafter's
    assert chosen([(LEARNED, [], 0.9), ("repeat", [], 0.9)]) == (LEARNED, [])


def _continuation_by_hand(tokens, longest, shortest=2, longest_match=4):
    for n in range(min(longest_match, len(tokens) - 1), shortest - 1, -1):
        for end in range(len(tokens) - 2, n - 2, -1):  # latest first, ending before the last token
            if tokens[end - n + 1 : end + 1] == tokens[-n:]:
                follows = tokens[end + 1 :]
                return [follows[k % len(follows)] for k in range(longest)]
    return []


def test_the_lookup_agrees_with_a_search_by_hand():
    import random

    rng = random.Random(0)
    for _ in range(500):
        tokens = [rng.randrange(4) for _ in range(rng.randrange(1, 40))]
        assert continuation(tokens, 6) == _continuation_by_hand(tokens, 6), tokens


def test_the_index_kept_as_tokens_grow_agrees_with_a_search_by_hand():
    import random

    rng = random.Random(1)
    for _ in range(100):
        tokens, index = [rng.randrange(4) for _ in range(rng.randrange(1, 6))], SuffixIndex()
        for _ in range(30):  # a step writes one token, or several where drafts landed
            assert index.continuation(tokens, 6) == _continuation_by_hand(tokens, 6), tokens
            tokens += [rng.randrange(4) for _ in range(rng.choice((1, 1, 1, 3)))]
    index = SuffixIndex()
    index.continuation([1, 2, 1, 2, 1], 3)
    assert index.continuation([5, 5, 5], 2) == [5, 5]  # another request's tokens: the index starts again
