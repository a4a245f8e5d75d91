"""Drafts from the request's own text, for any workload, at no model cost: what followed the latest
earlier occurrence of its last few tokens (prompt lookup, as vLLM's ``ngram`` method, over the prompt and
the answer so far).

Two kinds of text repeat where a learned drafter misses:
- values copied out of the prompt (an id, a date, a name in an extraction task), on schemas the drafter
  never saw;
- an answer that repeats itself: a list of objects with the same keys, or a model that loops, which a
  JSON grammar allowing any whitespace lets a small model do until ``max_tokens`` (the embedded model
  writes runs of blank lines on a fifth of the example dataset's schemas). Where the occurrence runs into
  the suffix itself, the period repeats (``continuation``), so a loop is drafted as far as the budget goes.

Per request the drafts follow their own acceptance (``acceptance.draft_budget`` with no drafting cost:
there is no pass). Every step's proposal is judged, verified or not: one that is not verified is kept as
a shadow and compared with the tokens the target writes next, so a request whose answer starts repeating
late earns its drafts within a few steps. ``engine_drafts`` applies this inside vLLM's engine core.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dspark_serve.acceptance import Acceptance, EngineDraftSource, landed

REPEAT_MATCH = (2, 4)  # shortest and longest suffix looked up


@dataclass
class SuffixIndex:
    """Where each run of ``REPEAT_MATCH`` tokens of one request last ended, kept as its tokens grow, so the
    engine core's lookup per request per step costs the new tokens, not a scan of the history (a numpy scan
    of 1024 tokens took ~30 us a request a step on the 2-core EPYC: a few percent of a step at 64 users)."""

    indexed: int = 0  # the runs ending before this position are in ``latest``
    latest: dict[tuple[int, ...], int] = field(default_factory=dict)

    def continuation(self, tokens: Sequence[int], longest: int, match: tuple[int, int] = REPEAT_MATCH) -> list[int]:
        """Up to ``longest`` tokens that followed the latest earlier occurrence of the longest suffix of
        ``tokens`` (``match``: its shortest and longest length) found; where that occurrence runs into the
        suffix (a period of ``p`` tokens), the period repeats. Empty where no suffix occurs earlier.
        ``tokens`` must extend the tokens of the previous call (a request's, as it grows)."""
        size = len(tokens)
        shortest, longest_match = match
        if size - 1 < self.indexed:  # not the same request's tokens grown: start again
            self.indexed, self.latest = 0, {}
        if self.indexed < size - 1:  # runs ending before the last token: its earlier occurrences
            first = max(self.indexed - longest_match + 1, 0)
            chunk = list(tokens[first : size - 1])
            for end in range(self.indexed - first, len(chunk)):
                for n in range(shortest, min(longest_match, end + 1) + 1):
                    self.latest[tuple(chunk[end - n + 1 : end + 1])] = first + end
            self.indexed = size - 1
        if longest <= 0 or size <= shortest:
            return []
        suffix = list(tokens[max(size - longest_match, 0) :])
        for n in range(min(longest_match, size - 1), shortest - 1, -1):
            found = self.latest.get(tuple(suffix[-n:]))
            if found is not None:
                follows = list(tokens[found + 1 : size])  # at least one token: ``found`` < size - 1
                return [follows[k % len(follows)] for k in range(longest)]
        return []


def continuation(tokens: Sequence[int], longest: int, match: tuple[int, int] = REPEAT_MATCH) -> list[int]:
    """``SuffixIndex.continuation`` of ``tokens`` alone (no earlier calls)."""
    return SuffixIndex().continuation(tokens, longest, match)


@dataclass
class Pending:
    """A proposal not verified: where it starts in the request's tokens, and its tokens."""

    start: int
    drafts: list[int]


@dataclass
class RepeatDrafter(EngineDraftSource):
    """Per request: the acceptance of its repeat drafts and the proposal waiting to be judged; per server,
    how many repeat drafts were verified and landed."""

    PRIOR = Acceptance(accepted=0.2, rejected=1.8)  # most answers do not repeat: none verified until a shadow lands (rate 0.1)
    COUNTED = ("repeat_draft_tokens", "repeat_drafts_accepted")

    pending: dict[str, Pending] = field(default_factory=dict)
    indexes: dict[str, SuffixIndex] = field(default_factory=dict)

    def propose(self, request_id: str, tokens: Sequence[int], longest: int) -> list[int]:
        """The drafts to verify after ``tokens`` (the request's so far), cut to what pays; the whole proposal
        is judged against what the target writes unless it is verified (``verified``)."""
        self.judge(request_id, tokens)
        drafts = self.indexes.setdefault(request_id, SuffixIndex()).continuation(tokens, longest)
        if drafts and request_id not in self.pending:
            self.pending[request_id] = Pending(len(tokens), drafts)
        return drafts[: self.budget(request_id, len(drafts))]

    def judge(self, request_id: str, tokens: Sequence[int]) -> None:
        """Record the pending proposal as far as the target has written past it (a step writes one token where
        nothing is verified): a miss counts once, tokens that matched count as landed."""
        if (shadow := self.pending.get(request_id)) is None:
            return
        written = tokens[shadow.start : shadow.start + len(shadow.drafts)]
        if written:
            self.record(request_id, len(written), landed(shadow.drafts, written))
            del self.pending[request_id]

    def verified(self, request_id: str, drafted: int, accepted: int) -> None:
        """The step verified ``drafted`` of this request's repeat drafts; its proposal is judged by that."""
        if drafted > 0:
            self.pending.pop(request_id, None)
        super().verified(request_id, drafted, accepted)

    def per_request(self) -> tuple[dict[str, Any], ...]:
        return (self.history, self.pending, self.indexes)
