"""Grammar drafts under asynchronous scheduling: the text a request's grammar forces, in the drafts of
vLLM's V2 model runner (a GPU's), with asynchronous scheduling kept. On with grammar drafts.

Under asynchronous scheduling the worker proposes a step's drafts on the GPU as soon as the step before
has sampled, before the engine core has seen those tokens; so ``engine_drafts``, which sets drafts in the
engine core after each step, has no step to set them for. The forced text still reaches the drafts, one
step late, and nothing waits for it:

1. **Engine core** (``Scheduler.get_grammar_bitmask``, ``ForcedTexts``): when a step's grammar bitmask is
   built, each structured request's matcher has accepted every token the engine core has seen. The text
   the grammar forces from there, spelt in the target's tokens (``GrammarDrafter.spell``), goes to the
   worker with the bitmask (``FORCED`` on vLLM's ``GrammarOutput``): the token position it starts at, and
   up to ``2k + 1`` tokens (the step in flight writes up to ``k + 1``, and ``k`` more are drafted).
2. **Worker** (the V2 runner's ``sample_tokens``, ``ForcedOverlay``): after the step samples, the
   speculator's drafts (``ngram_gpu``, ``dflash``, ...) are overlaid on the GPU (``overlay``): where the
   tokens written since that position are the start of the forced tokens, the drafts are the forced
   tokens that follow them. The comparison runs on the device: no host synchronisation.

The same way, where nothing is forced, the engine core sends what the JSON structure memory predicts for a
request drafted by the GPU's prompt copy (``structure_lookahead``).

The engine core walks the drafts through the grammar as it walks any (``update_draft_token_ids_in_output``)
and the target verifies them, so a forced draft the target would not write is rejected: answers do not
change. Drafts are an optimisation: the first error on either side turns this off, with one warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dspark_serve.grammar_drafts import GrammarDrafter, TokenTexts
from dspark_serve.state import EngineCounters
from dspark_serve.structure_lookahead import StructureLookahead

HOOKED = (  # the vLLM methods its hooks run on (targets/ installs them)
    "vllm.v1.core.sched.scheduler:Scheduler.get_grammar_bitmask",
    "vllm.v1.worker.gpu.model_runner:GPUModelRunner.sample_tokens",
)
READS = (
    "vllm.v1.core.sched.output:GrammarOutput",
    # the deferred path: a step's bitmask is built after the step before was taken in (update_from_output)
    "vllm.v1.engine.core:EngineCore.step_with_batch_queue",
    "vllm.v1.worker.gpu.spec_decode.speculator:BaseSpeculator.propose",
    "vllm.v1.worker.gpu.states:RequestState",
    "vllm.v1.worker.gpu.input_batch:InputBatch",
)
FORCED = "dspark_forced"  # GrammarOutput attribute (engine core -> worker): {request id: (position, tokens)}
PENDING = "_dspark_forced"  # on the V2 runner: the step's forced tokens, while it samples and drafts
WRAPPED = "_dspark_overlaid"  # on a speculator: its propose overlays forced tokens

logger = logging.getLogger("dspark")
# The engine core's time a step on forced texts and predictions, at most this share of a plain step as the gate
# measured it at this batch size: under asynchronous scheduling a structured step samples only after they are
# worked out, and they cost per request (a grammar's jump-forward, the structure memory's walk): 4 ms a step at 256
# requests drafting on a 2-core EPYC (studies/hook_cost.py). The requests left out are the first served next step.
FORCED_SHARE = 0.05

Forced = dict[str, tuple[int, tuple[int, ...]]]


class ForcedTexts:
    """Engine core: each structured request's drafts for the worker, sent with the step's grammar bitmask: its
    forced text (``grammar``), else the structure memory's prediction (``lookahead``). ``drafting``: whether the
    drafts the worker makes after the step being scheduled will be verified (the speculation gate's plan for it,
    made in ``Scheduler.schedule`` before vLLM asks for this step's bitmask); where not, none are sent, and
    the engine core spends nothing on them."""

    def __init__(
        self,
        grammar: GrammarDrafter | None,
        drafting: Callable[[], bool] = lambda: True,
        lookahead: StructureLookahead | None = None,
        counters: EngineCounters | None = None,
        budget: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.grammar, self.drafting, self.lookahead, self.counters = grammar, drafting, lookahead, counters
        self.budget = budget  # seconds a step may spend here (None: no bound)
        self.tokens: TokenTexts | None = None
        self.broken = False
        self.first = 0  # where the next step's walk over its requests starts: past the last step's cut

    def get_grammar_bitmask(self, proceed, scheduler, scheduler_output):
        output = proceed(scheduler_output)
        # Synchronous scheduling drafts the forced text in the engine core itself (engine_drafts).
        if output is None or self.broken or not scheduler.scheduler_config.async_scheduling or not self.drafting():
            return output
        try:
            if forced := self.forced(scheduler, output.structured_output_request_ids):
                setattr(output, FORCED, forced)
        except Exception as exc:  # drafts are an optimisation: never stop the engine for them
            self.broken = True
            logger.warning("DSpark: grammar drafts under asynchronous scheduling stopped: %r", exc)
        return output

    def forced(self, scheduler: Any, request_ids: Sequence[str]) -> Forced:
        """{request id: (the position its drafts start at, its drafts)} for ``request_ids``: the forced text
        where its grammar forces one, else what the structure memory predicts (``lookahead``)."""
        spec = scheduler.vllm_config.speculative_config
        tokenizer = getattr(scheduler.structured_output_manager, "tokenizer", None)
        if spec is None or tokenizer is None:
            return {}
        if self.tokens is None:
            self.tokens = TokenTexts(tokenizer)
        tokens_of, grammar, lookahead = self.tokens, self.grammar, self.lookahead
        longest = 2 * int(spec.num_speculative_tokens) + 1
        forced: Forced = {}
        counted = {"async_forced_tokens": 0, "async_structure_tokens": 0}
        limit, started = self.budget(), time.perf_counter()
        first = self.first % len(request_ids) if request_ids else 0
        ordered = [*request_ids[first:], *request_ids[:first]]
        for done, request_id in enumerate(ordered):
            if done and limit is not None and time.perf_counter() - started > limit:  # one a step at least
                self.first = first + done  # the ones left out go first next step
                break
            if (request := scheduler.requests.get(request_id)) is None:
                continue
            drafts: list[int] = []
            if grammar is not None and (text := grammar.next_forced(request_id, request, tokens_of)):
                drafts = grammar.spell(text, tokens_of.encode, longest)
                counted["async_forced_tokens"] += len(drafts)
            if not drafts and lookahead is not None:
                drafts = lookahead.predict(request_id, request, tokenizer, longest)
                counted["async_structure_tokens"] += len(drafts)
            if drafts:
                forced[request_id] = (len(request.all_token_ids), tuple(drafts))
        if lookahead is not None:
            lookahead.forget(scheduler.requests)
        if self.counters is not None:
            for name, count in counted.items():
                if count:
                    self.counters.add(name, count)
        return forced


def overlay(drafts, token_ids, total_len, rows, starts, forced, lengths):
    """``drafts`` [B, K] with each row's forced tokens in place where its tokens agree with them (torch,
    any device, no host synchronisation).

    ``token_ids`` [R, L] / ``total_len`` [R]: every request's tokens so far (the step's included) and how
    many; ``rows`` [B]: each batch row's request row; ``starts`` [B]: the position each row's forced tokens
    start at (-1: none); ``forced`` [B, M] / ``lengths`` [B]: those tokens. A row's tokens from ``start``
    on must be the forced tokens' start; the drafts are then the ``K`` forced tokens after them, as many as
    are left, and the speculator's own in the slots after those."""
    import torch

    width, k = forced.shape[1], drafts.shape[1]
    valid_row = rows >= 0
    safe_rows = rows.clamp(min=0)
    written = total_len[safe_rows].long() - starts  # tokens written since the forced text began
    cols = torch.arange(width, device=drafts.device)
    positions = (starts.unsqueeze(1) + cols).clamp(0, token_ids.shape[1] - 1)
    seen = token_ids[safe_rows.unsqueeze(1), positions].long()
    agree = ((seen == forced) | (cols >= written.unsqueeze(1))).all(dim=1)
    usable = valid_row & (starts >= 0) & (written >= 0) & (written < lengths) & agree
    ahead = written.unsqueeze(1) + torch.arange(k, device=drafts.device)
    next_forced = forced.gather(1, ahead.clamp(0, width - 1))
    take = usable.unsqueeze(1) & (ahead < lengths.unsqueeze(1))
    return torch.where(take, next_forced.to(drafts.dtype), drafts)


def packed_rows(req_ids: Sequence[str], forced: Mapping[str, tuple[int, Sequence[int]]]):
    """(starts [B], lengths [B], tokens [B, M]) as numpy arrays, in batch order; None when no row has any."""
    import numpy as np

    rows = [(i, forced[request_id]) for i, request_id in enumerate(req_ids) if request_id in forced]
    if not rows:
        return None
    width = max(len(tokens) for _, (_, tokens) in rows)
    table = np.zeros((len(req_ids), width + 2), dtype=np.int64)
    table[:, 0] = -1
    for i, (start, tokens) in rows:
        table[i, 0], table[i, 1] = start, len(tokens)
        table[i, 2 : 2 + len(tokens)] = tokens
    return table


class ForcedOverlay:
    """Worker (vLLM's V2 model runner): the forced tokens the engine core sent with a step's bitmask,
    overlaid on the drafts its speculator proposes after the step samples."""

    def __init__(self) -> None:
        self.broken = False

    def sample_tokens(self, proceed, runner, grammar_output):
        forced = getattr(grammar_output, FORCED, None) if grammar_output is not None and not self.broken else None
        speculator = getattr(runner, "speculator", None)
        if forced and speculator is not None and not getattr(speculator, WRAPPED, False):
            self.wrap(runner, speculator)
        setattr(runner, PENDING, forced)
        try:
            return proceed(grammar_output)
        finally:
            setattr(runner, PENDING, None)  # warm-up and profiling runs call the speculator with nothing pending

    def wrap(self, runner: Any, speculator: Any) -> None:
        inner = speculator.propose

        def propose(*args: Any, **kwargs: Any) -> Any:
            drafts = inner(*args, **kwargs)
            forced = getattr(runner, PENDING, None)
            if not forced or self.broken:
                return drafts
            try:
                return self.apply(drafts, args[0] if args else kwargs["input_batch"], runner.req_states, forced)
            except Exception as exc:  # drafts are an optimisation: never stop the engine for them
                self.broken = True
                logger.warning("DSpark: grammar drafts under asynchronous scheduling stopped: %r", exc)
                return drafts

        speculator.propose = propose
        setattr(speculator, WRAPPED, True)

    @staticmethod
    def apply(drafts: Any, input_batch: Any, req_states: Any, forced: Forced) -> Any:
        import torch

        table = packed_rows(list(input_batch.req_ids)[: drafts.shape[0]], forced)
        if table is None:
            return drafts
        host = torch.from_numpy(table)
        packed = host.pin_memory().to(drafts.device, non_blocking=True) if drafts.is_cuda else host
        return overlay(
            drafts,
            req_states.all_token_ids.gpu,
            req_states.total_len.gpu,
            input_batch.idx_mapping[: drafts.shape[0]],
            packed[:, 0],
            packed[:, 2:],
            packed[:, 1],
        )
