"""The DSpark drafter: speculation that exploits JSON structure, for any model, with no draft model.

Loaded by vLLM's ``custom_class`` speculative method inside the engine process
(``{"method": "custom_class", "model": "dspark_serve.drafter.JsonDrafter"}``). Each step it proposes
up to ``k`` tokens per running request, and the target model verifies them, so the output is the one
the model would have produced anyway (a rejected draft costs compute, never correctness).

Two sources, chosen by where the answer is in its JSON:

- **Structure memory**, at structural positions (after a value or a bracket): what the model's own
  earlier answers always did next. Its context is the answer's *skeleton*, the last few punctuation
  and key tokens with each value collapsed to one marker, so ``"name":"<any name>","`` is followed by
  ``address`` whatever the name was. A continuation is proposed once it was seen ``MIN_SEEN`` times
  and taken ``MIN_SHARE`` of the time.
- **Prompt copy**, inside values: the tokens that followed the longest earlier occurrence of the last
  few tokens (values copied out of the input, as in extraction tasks). A copy stops where the prompt's
  own field ends (a delimiter such as ``;`` or ``，``); structure memory then closes the value.

Load-aware length: a verification step costs about ``batch * (k + 1)`` token positions; past
``VERIFY_BUDGET`` positions per step the draft length shrinks with the batch (vLLM's dynamic speculative
decoding). The default is a wide bound: within it, how many drafts a request verifies is the speculation
gate's choice, from step costs measured on the machine (``acceptance.StepCosts``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from dspark_serve.engine_config import DEFAULT_VERIFY_BUDGET, EngineConfig

SKELETON_CONTEXT = 5  # skeleton items that key the structure memory (4 confuses user.name with items[].name)
MIN_SEEN = 3
MIN_SHARE = 0.9
COPY_NGRAM = (2, 5)  # shortest and longest suffix matched for prompt copy
WINDOW = 96  # tokens looked back at to rebuild the skeleton
MAX_MEMORY = 500_000  # contexts kept; the memory restarts when full (it relearns within a few requests)
VERIFY_BUDGET = config.verify_budget if (config := EngineConfig.from_env()) is not None else DEFAULT_VERIFY_BUDGET

# Token kinds, from each token's text. *_Q: the same punctuation with a quote in it (only those can end a
# string value: an address's ", " is part of the value).
# OPENS_STRING: opens a string value ('":"'); OPENS_BARE: a number, literal, object or array (':', '[').
# BRACKET: unquoted punctuation with a bracket; structure in JSON, but ends a copy inside a string value.
WORD, DELIMITER, OPENS_KEY, OPENS_KEY_Q, OPENS_STRING, OPENS_BARE, OPENS_BARE_Q, PUNCT, PUNCT_Q, BRACKET = range(10)
QUOTED = {OPENS_KEY_Q: OPENS_KEY, OPENS_STRING: OPENS_STRING, OPENS_BARE_Q: OPENS_BARE, PUNCT_Q: PUNCT}
ENDS_COPY = (DELIMITER, BRACKET)
VALUE = -1  # the skeleton's marker for a value's tokens
JSON_PUNCT = set('{}[]":,')
FIELD_DELIMITERS = set(";；。，\n（）()")


def token_kind(text: str) -> int:
    """WORD, or which kind of JSON punctuation ``text`` is (DELIMITER: ends a field in free text)."""
    core = text.strip()
    if core and all(c in JSON_PUNCT for c in core):
        quoted = '"' in core
        if core.endswith(('{"', ',"')):
            return OPENS_KEY_Q if quoted else OPENS_KEY
        if core.endswith((':"', '["')):
            return OPENS_STRING
        if core.endswith((":", "[")):
            return OPENS_BARE_Q if quoted else OPENS_BARE
        if quoted:
            return PUNCT_Q
        return BRACKET if any(c in "{}[]" for c in core) else PUNCT
    if any(c in FIELD_DELIMITERS for c in text):
        return DELIMITER
    return WORD


def draft_length(k: int, batch: int, budget: int = VERIFY_BUDGET) -> int:
    """Draft tokens per request for this batch size: ``k`` while ``batch * (k + 1)`` fits the budget."""
    return max(0, min(k, budget // max(1, batch) - 1))


class Skeleton:
    """The JSON skeleton of a token stream: punctuation and keys kept, each value run one marker. ``kinds``: each
    token's kind, a list (a push is a Python list read, not a numpy scalar's: the engine core pushes every
    output token of every request it predicts for)."""

    def __init__(self, kinds: Sequence[int]) -> None:
        self.kinds = kinds
        self.items: list[int] = []
        self.in_value = False  # the last punctuation opened a value
        self.in_string = False  # ... and that value is a string (only a quote can end it)
        self.pushed = 0  # tokens seen
        self.value_from = 0  # ... when the current value opened
        self.json_seen = False  # quoted JSON punctuation seen: this stream is (or is about to be) JSON

    def structural(self, token: int) -> bool:
        """Whether ``token`` is JSON structure here (a comma inside a string value is not)."""
        kind = self.kinds[token] if token < len(self.kinds) else WORD
        if kind in QUOTED:
            return True
        return kind in (OPENS_KEY, OPENS_BARE, PUNCT, BRACKET) and not (self.in_value and self.in_string)

    def push(self, token: int) -> None:
        self.pushed += 1
        if self.structural(token):
            raw = self.kinds[token]
            self.json_seen = self.json_seen or raw in QUOTED
            kind = QUOTED.get(raw, raw)
            self.items.append(token)
            self.in_value = kind in (OPENS_STRING, OPENS_BARE)
            self.in_string = kind == OPENS_STRING
            self.value_from = self.pushed
        elif self.in_value:
            if not self.items or self.items[-1] != VALUE:
                self.items.append(VALUE)
        else:
            self.items.append(token)  # a key's tokens (or text outside JSON)

    def context(self) -> tuple[int, ...]:
        return tuple(self.items[-SKELETON_CONTEXT:])

    def clone(self) -> Skeleton:
        """A copy to draft on: the items the context reads, and where the stream stands."""
        copy = Skeleton(self.kinds)
        copy.items = self.items[-SKELETON_CONTEXT:]
        copy.in_value, copy.in_string, copy.json_seen = self.in_value, self.in_string, self.json_seen
        copy.pushed, copy.value_from = self.pushed, self.value_from
        return copy

    @property
    def inside_value(self) -> bool:
        return bool(self.items) and self.items[-1] == VALUE


class StructureMemory:
    """Next-token counts after each skeleton context of the model's own outputs."""

    def __init__(self, kinds: np.ndarray | Sequence[int]) -> None:
        self.kinds: list[int] = kinds.tolist() if isinstance(kinds, np.ndarray) else list(kinds)
        self.counts: dict[tuple[int, ...], dict[int, int]] = defaultdict(dict)

    def skeleton(self, tokens: Sequence[int]) -> Skeleton:
        skeleton = Skeleton(self.kinds)
        for token in tokens:
            skeleton.push(int(token))
        return skeleton

    def learn(self, tokens: np.ndarray, start: int) -> Skeleton:
        """Record ``tokens[start:]`` at structural positions, each after the skeleton before it; returns
        the skeleton of the whole window (what ``propose_one`` starts from)."""
        if len(self.counts) > MAX_MEMORY:
            self.counts.clear()
        skeleton = self.skeleton(tokens[max(0, start - WINDOW) : start].tolist())
        for j in range(start, len(tokens)):
            self.record(skeleton, int(tokens[j]))
        return skeleton

    def record(self, skeleton: Skeleton, token: int) -> None:
        """``token`` came after ``skeleton``: counted (at a structural position), then pushed onto it."""
        if not skeleton.in_value or skeleton.structural(token):  # a value's content is never learned
            nexts = self.counts[skeleton.context()]
            nexts[token] = nexts.get(token, 0) + 1
        skeleton.push(token)

    def continuation(self, skeleton: Skeleton, longest: int) -> list[int]:
        """What the outputs so far always wrote after ``skeleton`` (a clone of it is walked), up to ``longest``
        tokens; none for plain text."""
        if not skeleton.json_seen:
            return []
        walked, drafts = skeleton.clone(), list[int]()
        while len(drafts) < longest and (token := self.predict(walked)) is not None:
            drafts.append(token)
            walked.push(token)
        return drafts

    def predict(self, skeleton: Skeleton) -> int | None:
        """The continuation the outputs so far took (nearly) every time after this skeleton, if any."""
        nexts = self.counts.get(skeleton.context())
        if not nexts:
            return None
        token, seen = max(nexts.items(), key=lambda item: item[1])
        return token if seen >= MIN_SEEN and seen >= MIN_SHARE * sum(nexts.values()) else None


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


class TextCopy:
    """Copy by text where token ids differ: a value's first word is tokenised without the space it has
    in the prompt ("Joshua" vs " Joshua"), so id matching misses it. Finds the value's text so far in the
    text before it and proposes the tokens of what follows, up to the prompt field's end."""

    def __init__(self, tokenizer, max_chars: int = 80) -> None:
        self.tokenizer = tokenizer
        self.max_chars = max_chars

    def __call__(self, tokens: np.ndarray, value_length: int, k: int) -> list[int]:
        if value_length <= 0 or value_length >= len(tokens):
            return []
        value_ids = tokens[-value_length:].tolist()
        value = self.tokenizer.decode(value_ids)
        if len(value.strip()) < 2:
            return []  # too short to place
        before = self.tokenizer.decode(tokens[:-value_length].tolist())
        at = before.rfind(value)
        if at < 0:
            return []
        rest = before[at + len(value) : at + len(value) + self.max_chars]
        end = next((i for i, c in enumerate(rest) if c in FIELD_DELIMITERS or c == '"'), len(rest))
        if end == 0:
            return []
        tail = rest[:end].rstrip()
        if not tail:
            return []
        ids = self.tokenizer.encode(value + tail, add_special_tokens=False)
        if ids[: len(value_ids)] != value_ids:
            return []  # the continuation would re-tokenise the value itself: no safe draft
        return ids[len(value_ids) :][:k]


def propose_one(
    tokens: np.ndarray, k: int, memory: StructureMemory, text_copy: TextCopy | None = None, skeleton: Skeleton | None = None
) -> list[int]:
    """The draft for one request whose tokens so far (prompt and output) are ``tokens`` (``skeleton``: of
    their last WINDOW tokens, when the caller has it). No draft for plain text: no JSON in sight."""
    draft: list[int] = []
    skeleton = skeleton or memory.skeleton(tokens[-WINDOW:].tolist())
    if not skeleton.json_seen:
        return draft  # free text (freeform answers): drafts would cost verification and rarely land
    copy: list[int] = []
    position, searches = 0, 0
    while len(draft) < k:
        if position >= len(copy) and searches < 3:  # no copy yet, or it ran out or diverged: look again
            extended = np.concatenate([tokens, np.asarray(draft, dtype=tokens.dtype)]) if draft else tokens
            # Inside a value one matching token is enough to start copying ("ORD" -> "-2024...").
            ngram = (1, COPY_NGRAM[1]) if skeleton.inside_value else COPY_NGRAM
            copy, position, searches = copy_candidates(extended, k, ngram), 0, searches + 1
            if skeleton.inside_value and text_copy is not None:
                by_text = text_copy(extended, skeleton.pushed - skeleton.value_from, k)
                if by_text and (not copy or memory.kinds[copy[0]] in ENDS_COPY or len(by_text) > len(copy)):
                    copy = by_text
        copied = copy[position] if position < len(copy) else None
        copied_kind = memory.kinds[copied] if copied is not None and copied < len(memory.kinds) else WORD
        if skeleton.in_value and copied is not None and copied_kind not in ENDS_COPY and not skeleton.structural(copied):
            token = copied  # inside a value: keep copying the input
        elif (remembered := memory.predict(skeleton)) is not None:
            token = remembered  # structure: what the answers always did here
        elif copied is not None and copied_kind not in ENDS_COPY:
            token = copied
        else:
            break
        position = position + 1 if token == copied else len(copy)
        draft.append(token)
        skeleton.push(token)
    return draft


def token_kinds(tokenizer) -> np.ndarray:
    """The kind of every token id in ``tokenizer``'s vocabulary."""
    size = len(tokenizer)
    return np.array([token_kind(tokenizer.decode([i])) for i in range(size)], dtype=np.int8)


class JsonDrafter:
    """vLLM ``custom_class`` proposer: structure memory plus prompt copy, load-aware length."""

    def __init__(self, vllm_config) -> None:
        from transformers import AutoTokenizer

        spec = vllm_config.speculative_config
        self.k = int(spec.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        tokenizer = AutoTokenizer.from_pretrained(vllm_config.model_config.tokenizer)
        self.memory = StructureMemory(token_kinds(tokenizer))
        self.text_copy = TextCopy(tokenizer)

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None) -> list[list[int]]:
        k = draft_length(self.k, sum(1 for s in sampled_token_ids if len(s)))
        if k == 0:  # compute-bound: no drafts, and no drafter work on the critical path either
            return [[] for _ in sampled_token_ids]
        drafts: list[list[int]] = []
        for i, sampled in enumerate(sampled_token_ids):
            length = int(num_tokens_no_spec[i])
            if not len(sampled):
                drafts.append([])
                continue
            tokens = token_ids_cpu[i, :length]
            skeleton = self.memory.learn(tokens, length - len(sampled))
            room = min(k, self.max_model_len - length - 1)
            drafts.append(propose_one(tokens, room, self.memory, self.text_copy, skeleton) if room > 0 else [])
        return drafts

    def load_model(self, *args, **kwargs) -> None:
        """Nothing to load: the drafter has no weights."""
