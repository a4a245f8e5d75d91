"""Drafts made in vLLM's engine core, with no drafter pass: the text a request repeats (``repeat_drafts``,
on by default) and the text its grammar forces (``grammar_drafts``, on by default).

After each step (``EngineCore.post_step``, after the learned drafter's drafts were fetched and cut by the
speculation gate), every running request may verify one source's drafts next step: the learned drafter's,
its repeat drafts, or its grammar drafts. Each source's drafts are cut to what pays by that source's own
acceptance on this request; the step verifies the source expected to land the most (``chosen``). Drafts
that are not the learned drafter's are walked by the request's grammar (``validate_tokens``) as any draft
is, so nothing it rejects is verified, and their verification is booked to their source, not to the
learned drafter (``ENGINE_DRAFTED``).

Only under vLLM's synchronous scheduling (the CPU's): under asynchronous scheduling (a GPU's, for these
drafters) vLLM still calls ``EngineCore.post_step``, but no engine-core drafts are made there; grammar
drafts reach the worker's drafts there instead (``async_grammar_drafts``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from dspark_serve.acceptance import verified_drafts
from dspark_serve.grammar_drafts import GrammarDrafter, TokenTexts
from dspark_serve.repeat_drafts import RepeatDrafter
from dspark_serve.state import ENGINE_DRAFTED

HOOKED = (  # the vLLM methods its hooks run on (targets/ installs them)
    "vllm.v1.engine.core:EngineCore.post_step",
    "vllm.v1.core.sched.scheduler:Scheduler.update_from_output",
)
READS = (
    "vllm.v1.structured_output:StructuredOutputManager.validate_tokens",
    "vllm.v1.request:Request.num_tokens_with_spec",  # how the scheduler schedules the drafts set here
    "vllm.config:SpeculativeConfig.num_speculative_tokens",
    "vllm.v1.engine.core:EngineCore.step",  # calls post_step on both scheduling paths
)
LEARNED = "learned"

logger = logging.getLogger("dspark")


def expected_landed(drafts: Sequence[int], rate: float) -> float:
    """Drafts expected to land when each lands with chance ``rate`` given the one before it did."""
    return sum(rate**k for k in range(1, len(drafts) + 1))


def chosen(candidates: Sequence[tuple[str, Sequence[int], float]]) -> tuple[str, list[int]]:
    """The (source, drafts) expected to land the most of ``candidates`` (source, drafts, acceptance rate);
    the first wins ties, so list the learned drafter's first."""
    best = max(candidates, key=lambda c: expected_landed(c[1], c[2]), default=(LEARNED, [], 0.0))
    if not best[1]:
        return LEARNED, list(candidates[0][1]) if candidates else []
    return best[0], list(best[1])


class EngineDraftHooks:
    """Repeat and grammar drafts on the engine core (``targets.engine_core``) and the scheduler
    (``targets.scheduler``). ``learned_rate``: a request's recent acceptance of the learned drafter's drafts
    (the speculation gate's); ``speculating``: whether the step being planned may verify drafts at all (the
    governor's mode). Drafts are an optimisation: the first error turns them off, with one warning."""

    def __init__(
        self,
        repeat: RepeatDrafter | None,
        grammar: GrammarDrafter | None,
        learned_rate: Callable[[str], float],
        speculating: Callable[[], bool] = lambda: True,
    ) -> None:
        self.repeat, self.grammar, self.learned_rate, self.speculating = repeat, grammar, learned_rate, speculating
        self.broken = False
        self.tokens: TokenTexts | None = None

    def add_drafts(self, scheduler: Any) -> None:
        repeat, grammar = self.repeat, self.grammar
        manager = scheduler.structured_output_manager
        tokenizer: Any = getattr(manager, "tokenizer", None)  # None: grammar drafts need it, repeat drafts do not
        spec = scheduler.vllm_config.speculative_config
        if spec is None:
            return
        longest = int(spec.num_speculative_tokens)  # the worker's buffers hold no more
        if tokenizer is not None and self.tokens is None:
            self.tokens = TokenTexts(tokenizer)
        tokens_of = self.tokens

        for request in scheduler.running:
            setattr(request, ENGINE_DRAFTED, None)
            if request.is_prefill_chunk or request.is_finished():
                continue
            request_id, tokens = request.request_id, request.all_token_ids
            learned = (LEARNED, request.spec_token_ids, self.learned_rate(request_id))
            candidates: list[tuple[str, Sequence[int], float]] = [learned]
            # Not even ``longest`` repeat drafts could beat the learned drafter's: no lookup (nor judging) this step.
            if repeat is not None and expected_landed(range(longest), repeat.rate(request_id)) > expected_landed(learned[1], learned[2]):
                drafts = repeat.propose(request_id, tokens, longest)  # judges its pending proposal first: rate after
                candidates.append(("repeat", drafts, repeat.rate(request_id)))
            if grammar is not None and tokens_of is not None and request.use_structured_output:
                # Not even asked for its forced text where no grammar draft would pay
                if forced := grammar.next_forced(request_id, request, tokens_of, grammar.budget(request_id, longest) > 0):
                    drafts = grammar.propose(request_id, forced, tokens_of.encode, longest)
                    candidates.append(("grammar", drafts, grammar.rate(request_id)))
            source, drafts = chosen(candidates)
            if source != LEARNED:
                request.spec_token_ids = manager.validate_tokens(request, drafts) if request.use_structured_output else drafts
                setattr(request, ENGINE_DRAFTED, source if request.spec_token_ids else None)

    def post_step(self, proceed, engine, model_executed):
        proceed(model_executed)
        # vLLM calls post_step under asynchronous scheduling too, where the worker fills each request's draft
        # positions with its own drafts: drafts set here would be overwritten, or find none to stand in for.
        if model_executed and not self.broken and not engine.async_scheduling and self.speculating():
            try:
                self.add_drafts(engine.scheduler)
            except Exception as exc:  # drafts are an optimisation: never stop the engine for them
                self.broken = True
                logger.warning("DSpark: engine-core drafts stopped: %r", exc)

    def update_from_output(self, proceed, scheduler, scheduler_output, model_runner_output):
        outputs = proceed(scheduler_output, model_runner_output)
        sources = {"repeat": self.repeat, "grammar": self.grammar}
        if not scheduler.scheduler_config.async_scheduling:  # only there were drafts made here (post_step) to judge
            steps = verified_drafts(
                scheduler_output.scheduled_spec_decode_tokens,
                model_runner_output.req_id_to_index,
                model_runner_output.sampled_token_ids or [],
            )
            for request_id, drafted, accepted in steps:
                source = sources.get(getattr(scheduler.requests.get(request_id), ENGINE_DRAFTED, None) or "")
                if source is not None:
                    source.verified(request_id, drafted, accepted)
        for source in sources.values():
            if source is not None:
                source.forget(scheduler.requests)
        return outputs
