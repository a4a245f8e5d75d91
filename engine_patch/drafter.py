"""The DSpark drafter: speculation that exploits JSON structure, for any model, with no draft model.

Loaded by vLLM's ``custom_class`` speculative method inside the engine process
(``{"method": "custom_class", "model": "engine_patch.drafter.JsonDrafter"}``). Each step it proposes
up to ``k`` tokens per running request from two cheap sources, and the target model verifies them, so
the output is the one the model would have produced anyway (rejected drafts cost compute, never
correctness):

- **Structure memory**: what the model's own earlier outputs always did after the same few tokens.
  In JSON that is the skeleton: punctuation, the next key, the closing brackets. A continuation is
  proposed only once it has been seen ``MIN_SEEN`` times and taken at least ``MIN_SHARE`` of the time,
  so values (names, numbers) that vary between requests are never guessed from memory.
- **Prompt copy**: the tokens that followed the longest earlier occurrence of the last few tokens in
  this request (prompt and output), i.e. values copied out of the input, as in extraction tasks.

Structure memory wins where the two disagree: after a copied value, the prompt goes on with its own
text while the JSON goes on with ``","next_key":``.

Load-aware length: a verification step costs about ``batch * (k + 1)`` token positions. Above
``VERIFY_BUDGET`` positions per step the machine is compute-bound and drafts would cost throughput, so
the draft length shrinks with the batch and reaches 0 for large batches (vLLM's DSpark verifier and
its dynamic speculative decoding do the same).
"""

from __future__ import annotations

import os
from collections import defaultdict

import numpy as np

CONTEXT = 4  # tokens of context that key the structure memory
MIN_SEEN = 3
MIN_SHARE = 0.9
COPY_NGRAM = (2, 5)  # shortest and longest suffix matched for prompt copy
MAX_MEMORY = 500_000  # contexts kept; the memory restarts when full (it relearns within a few requests)
VERIFY_BUDGET = int(os.environ.get("DSPARK_VERIFY_BUDGET", "64"))


def draft_length(k: int, batch: int, budget: int = VERIFY_BUDGET) -> int:
    """Draft tokens per request for this batch size: ``k`` while ``batch * (k + 1)`` fits the budget."""
    return max(0, min(k, budget // max(1, batch) - 1))


class StructureMemory:
    """Next-token counts after each ``CONTEXT``-token context of the model's own outputs."""

    def __init__(self, context: int = CONTEXT) -> None:
        self.context = context
        self.counts: dict[tuple[int, ...], dict[int, int]] = defaultdict(dict)

    def learn(self, tokens: np.ndarray, start: int) -> None:
        """Record ``tokens[start:]``, each after the ``context`` tokens before it."""
        if len(self.counts) > MAX_MEMORY:
            self.counts.clear()
        for j in range(max(start, self.context), len(tokens)):
            nexts = self.counts[tuple(tokens[j - self.context : j].tolist())]
            token = int(tokens[j])
            nexts[token] = nexts.get(token, 0) + 1

    def predict(self, tail: list[int]) -> int | None:
        """The continuation of ``tail`` that the outputs so far took (nearly) every time, if any."""
        nexts = self.counts.get(tuple(tail[-self.context :]))
        if not nexts:
            return None
        token, seen = max(nexts.items(), key=lambda item: item[1])
        total = sum(nexts.values())
        return token if seen >= MIN_SEEN and seen >= MIN_SHARE * total else None


def copy_candidates(tokens: np.ndarray, k: int, ngram: tuple[int, int] = COPY_NGRAM) -> list[int]:
    """Up to ``k`` tokens that followed the longest (then latest) earlier match of the sequence's tail."""
    shortest, longest = ngram
    length = len(tokens)
    for n in range(min(longest, length - 1), shortest - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], n)
        hits = np.flatnonzero((windows == tokens[-n:]).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return tokens[start : start + k].tolist()
    return []


def propose_one(tokens: np.ndarray, k: int, memory: StructureMemory) -> list[int]:
    """The draft for one request whose tokens so far (prompt and output) are ``tokens``."""
    draft: list[int] = []
    tail = tokens[-memory.context :].tolist()
    copy = copy_candidates(tokens, k)
    position, searches = 0, 1
    while len(draft) < k:
        token = memory.predict(tail)
        if token is not None:
            following = position < len(copy) and copy[position] == token
            position = position + 1 if following else len(copy)
        else:
            if position >= len(copy) and searches < 3:  # the copy ran out or diverged: look again
                copy, position, searches = (
                    copy_candidates(np.concatenate([tokens, draft]).astype(tokens.dtype), k),
                    0,
                    searches + 1,
                )
            if position >= len(copy):
                break
            token = copy[position]
            position += 1
        draft.append(token)
        tail.append(token)
    return draft


class JsonDrafter:
    """vLLM ``custom_class`` proposer: structure memory plus prompt copy, load-aware length."""

    def __init__(self, vllm_config) -> None:
        spec = vllm_config.speculative_config
        self.k = int(spec.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.memory = StructureMemory()

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None) -> list[list[int]]:
        k = draft_length(self.k, sum(1 for s in sampled_token_ids if len(s)))
        drafts: list[list[int]] = []
        for i, sampled in enumerate(sampled_token_ids):
            length = int(num_tokens_no_spec[i])
            if not len(sampled):
                drafts.append([])
                continue
            tokens = token_ids_cpu[i, :length]
            self.memory.learn(tokens, length - len(sampled))
            room = min(k, self.max_model_len - length - 1)
            drafts.append(propose_one(tokens, room, self.memory) if room > 0 else [])
        return drafts

    def load_model(self, *args, **kwargs) -> None:
        """Nothing to load: the drafter has no weights."""
