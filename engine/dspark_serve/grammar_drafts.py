"""Drafts that the request's own grammar forces, for any schema, at no model cost. On by default
(``DSPARK_GRAMMAR_DRAFTS=0`` turns them off, ``engine_plugin``).

After each step, in the engine-core process, a request under an xgrammar grammar asks its matcher for
the *jump-forward string*: the text every answer must write next (the rest of a property name once its
quote is open, a ``const``, the only key left...). That text is a draft that costs no drafter pass: spelt
in the target's own tokens where it was seen writing that text before (``Spellings``), else tokenized by
its tokenizer less the last token, which the target may write merged with what follows (``"`` then
``:`` as one ``":``). The grammar walks the draft as it walks any draft
(``validate_tokens``), so nothing it rejects is verified.

The learned drafter knows how the target tokenizes, the grammar only what text is forced: which drafts a
step verifies is chosen in ``engine_drafts``, by the drafts each source is expected to land. How many of a
request's grammar drafts are verified follows their own acceptance and the machine's measured cost of
a verified position (``acceptance.draft_budget`` with no drafting cost), so a machine where a verified
position costs as much as a step verifies none.

Whitespace: vLLM's JSON grammar lets the model put any whitespace between tokens, so outside strings
little is forced; inside them, property names are. vLLM's ``disable_any_whitespace`` would force more,
but it changes the answers (a comparison would have to give it to every arm alike) and xgrammar 0.2.8
rejects this model's compact tokens under it (``serve.build``), so it is left to the user.

These drafts are made after each step under vLLM's synchronous scheduling (the CPU's, ``engine_drafts``);
under asynchronous scheduling (a GPU's) the same forced text reaches the worker's drafts one step later
(``async_grammar_drafts``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dspark_serve.acceptance import EngineDraftSource

READS = (
    "vllm.v1.structured_output.backend_xgrammar:XgrammarGrammar.matcher",
    "vllm.v1.structured_output.request:StructuredOutputRequest.params",
    "vllm.sampling_params:StructuredOutputsParams.json_object",
)


def forced_tokens(forced: str, encode: Callable[[str], list[int]], longest: int) -> list[int]:
    """The forced text as the target would write it, up to ``longest`` tokens: encoded on its own, less its
    last token, which the target may write merged with the text after it."""
    if not forced or longest <= 0:
        return []
    return encode(forced)[:-1][:longest]


SPELLINGS = 4096  # forced texts whose spelling by the target is remembered, most recent first


@dataclass
class Spellings:
    """How the target really wrote each forced text it was seen writing: its tokens, in its own split.

    A small model need not write a property name as its tokenizer would encode it (the embedded one
    writes ``i`` ``n`` ``voice`` where the tokenizer says ``in`` ``voice``), and it writes it the same
    way again: requests of one workload share their schemas, so after the first answer the drafts of a
    forced name are the target's own tokens. Kept per server, bounded (``SPELLINGS``)."""

    known: OrderedDict[str, tuple[int, ...]] = field(default_factory=OrderedDict)

    def get(self, forced: str) -> tuple[int, ...] | None:
        if (spelled := self.known.get(forced)) is not None:
            self.known.move_to_end(forced)
        return spelled

    def learn(self, forced: str, written: Sequence[int], text_of: Callable[[int], str]) -> bool:
        """Remember the whole tokens of ``written`` (what the target wrote from where ``forced`` starts)
        that spell a proper prefix of ``forced``, and the spelling of each shorter forced text they leave.
        False while ``written`` is too short to tell; True once learnt."""
        tokens: list[int] = []
        pieces: list[str] = []
        text = ""
        for token in written:
            piece = text_of(token)
            if not piece or not forced.startswith(text + piece):
                break  # this token runs past the forced text (merged with what follows it)
            tokens.append(token)
            pieces.append(piece)
            text += piece
        else:
            if len(text) < len(forced):
                return False
        if text == forced:  # its last token ends the forced text: next time the target may merge it with what follows
            tokens, pieces = tokens[:-1], pieces[:-1]
        rest = forced
        for i, piece in enumerate(pieces):
            self.known[rest] = tuple(tokens[i:])
            self.known.move_to_end(rest)
            rest = rest[len(piece) :]
        while len(self.known) > SPELLINGS:
            self.known.popitem(last=False)
        return True


@dataclass
class GrammarDrafter(EngineDraftSource):
    """Per request: the acceptance of its grammar drafts and the forced text it is writing; per server:
    the target's spellings, and how many grammar drafts were verified and landed."""

    COUNTED = ("grammar_draft_tokens", "grammar_drafts_accepted")

    spellings: Spellings = field(default_factory=Spellings)
    writing: dict[str, tuple[int, str]] = field(default_factory=dict)  # request -> (token index, forced text)

    def spell(self, forced: str, encode: Callable[[str], list[int]], longest: int) -> list[int]:
        """Up to ``longest`` tokens of the forced text: the target's own spelling where it was seen, else the
        tokenizer's."""
        spelled = self.spellings.get(forced)
        return list(spelled[:longest]) if spelled else forced_tokens(forced, encode, longest)

    def propose(self, request_id: str, forced: str, encode: Callable[[str], list[int]], longest: int) -> list[int]:
        """This request's grammar drafts for the next step (``spell``), cut to what pays."""
        grammar = self.spell(forced, encode, longest)
        return grammar[: self.budget(request_id, len(grammar))]

    def watch(self, request_id: str, start: int, forced: str) -> None:
        """The request's tokens from ``start`` on must spell ``forced``: learn how, once written."""
        self.writing.setdefault(request_id, (start, forced))

    def written(self, request_id: str, tokens: Sequence[int], text_of: Callable[[int], str]) -> None:
        """``tokens``: the request's tokens so far; learns the spelling of the forced text it was writing."""
        if (watched := self.writing.get(request_id)) is not None:
            start, forced = watched
            if self.spellings.learn(forced, tokens[start:], text_of):
                del self.writing[request_id]

    def next_forced(self, request_id: str, request: Any, tokens_of: TokenTexts, ask: bool = True) -> str:
        """The text ``request``'s grammar forces next ('' where it forces none, or ``ask`` is False), watched so
        that its spelling is learnt once written; first learns the spelling of the text it was writing."""
        tokens = request.all_token_ids
        self.written(request_id, tokens, tokens_of.text_of)
        forced = jump_forward_string(request) if ask else ""
        if forced:
            self.watch(request_id, len(tokens), forced)
        return forced

    def per_request(self) -> tuple[dict[str, Any], ...]:
        return (self.history, self.writing)


ENCODED = 4096  # forced texts whose encoding is kept: a workload's requests share their schemas' names


class TokenTexts:
    """The tokenizer's encoding of a forced text and each token's text, each computed once: the engine core
    asks for the same few every step, and a tokenizer call costs more than the rest of a request's grammar
    drafts together."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.texts: dict[int, str] = {}
        self.encoded: OrderedDict[str, list[int]] = OrderedDict()

    def encode(self, text: str) -> list[int]:
        if (tokens := self.encoded.get(text)) is None:
            tokens = self.encoded[text] = self.tokenizer.encode(text, add_special_tokens=False)
            if len(self.encoded) > ENCODED:
                self.encoded.popitem(last=False)
        return list(tokens)

    def text_of(self, token: int) -> str:
        if (text := self.texts.get(token)) is None:
            text = self.texts[token] = self.tokenizer.decode([token])
        return text


def forces_text(structured: Any) -> bool:
    """False for json_object's grammar: any JSON value may come next anywhere but inside a literal, so it
    forces no answer token worth a draft (0.0% of three scenarios' answers, ``studies/grammar_forced.py``),
    and asking each step costs about 1% of a step at 8 users."""
    params = getattr(structured, "params", None)
    return not (getattr(params, "json_object", None) and getattr(params, "json", None) is None)


def jump_forward_string(request: Any) -> str:
    """The text the request's grammar forces next; empty where it has no xgrammar matcher (yet), or forces
    nothing worth a draft (``forces_text``)."""
    structured = getattr(request, "structured_output_request", None)
    if not forces_text(structured):
        return ""
    matcher = getattr(getattr(structured, "grammar", None), "matcher", None)
    if matcher is None or matcher.is_terminated():
        return ""
    return matcher.find_jump_forward_string()
