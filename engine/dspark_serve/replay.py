"""A drafter that replays what this server answered before: the speculation ceiling for a benchmark,
and a drafter at no model cost for prompts that repeat.

Loaded by vLLM's ``custom_class`` speculative method (``--dspark-drafter replay``). Every token the
server generates is remembered after the ``CONTEXT`` tokens before it (prompt or answer). A request
whose last ``CONTEXT`` tokens were seen before is drafted what followed them then, token after token,
up to the draft length. Once every prompt of a benchmark has been answered once (the harness primes
its ``oracle`` arm this way), each draft is exactly the answer stock decoding gives, drafted with no
forward pass: no drafter can do better at the same draft length on the same machine, so that arm's
throughput is the ceiling any drafter could reach, and a real drafter's share of it is how much is left.
The target model still verifies every draft, so a wrong replay (a context shared by two answers)
costs a rejected draft, never a changed answer. The draft length follows the load as the other
drafters' does (``drafter.draft_length``).
"""

from __future__ import annotations

import numpy as np

from dspark_serve.drafter import draft_length

CONTEXT = 16  # tokens that key a continuation: long enough to be one answer's own (prompt tail + answer so far)
MAX_MEMORY = 4_000_000  # remembered continuations; the memory restarts when full


class ReplayDrafter:
    """vLLM ``custom_class`` proposer: drafts the continuation this server generated before after the same context."""

    def __init__(self, vllm_config) -> None:
        self.k = int(vllm_config.speculative_config.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.next: dict[bytes, int] = {}

    def learn(self, tokens: np.ndarray, start: int) -> None:
        """Remember ``tokens[start:]``, each after the CONTEXT tokens before it."""
        if len(self.next) > MAX_MEMORY:
            self.next.clear()
        for j in range(max(start, CONTEXT), len(tokens)):
            self.next[tokens[j - CONTEXT : j].tobytes()] = int(tokens[j])

    def replay(self, tokens: np.ndarray, k: int) -> list[int]:
        """Up to ``k`` tokens that followed this context before, each extending the context for the next."""
        if len(tokens) < CONTEXT:
            return []
        context = tokens[-CONTEXT:].tolist()
        draft: list[int] = []
        while len(draft) < k:
            token = self.next.get(np.asarray(context[-CONTEXT:], dtype=tokens.dtype).tobytes())
            if token is None:
                break
            draft.append(token)
            context.append(token)
        return draft

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None) -> list[list[int]]:
        k = draft_length(self.k, sum(1 for s in sampled_token_ids if len(s)))
        drafts: list[list[int]] = []
        for i, sampled in enumerate(sampled_token_ids):
            if not len(sampled):
                drafts.append([])
                continue
            length = int(num_tokens_no_spec[i])
            tokens = token_ids_cpu[i, :length]
            self.learn(tokens, length - len(sampled))  # also under load: later requests replay it
            room = min(k, self.max_model_len - length - 1)
            drafts.append(self.replay(tokens, room) if room > 0 else [])
        return drafts

    def load_model(self, *args, **kwargs) -> None:
        """Nothing to load: the drafter has no weights."""
