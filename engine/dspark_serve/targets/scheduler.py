"""vLLM's ``Scheduler`` and ``AsyncScheduler`` (``vllm/v1/core/sched/``): the methods DSpark wraps."""

from __future__ import annotations

from collections.abc import Sequence

from dspark_serve.hooks import Hook, chain

REPLACES = (
    "vllm.v1.core.sched.scheduler:Scheduler._update_after_schedule",
    "vllm.v1.core.sched.async_scheduler:AsyncScheduler._update_after_schedule",
    "vllm.v1.core.sched.scheduler:Scheduler.update_from_output",
    "vllm.v1.core.sched.scheduler:Scheduler.update_draft_token_ids",
    "vllm.v1.core.sched.scheduler:Scheduler.get_grammar_bitmask",
)


def install(
    *,
    update_after_schedule: Sequence[Hook] = (),
    async_update_after_schedule: Sequence[Hook] = (),
    update_from_output: Sequence[Hook] = (),
    update_draft_token_ids: Sequence[Hook] = (),
    get_grammar_bitmask: Sequence[Hook] = (),
) -> None:
    """Each list's hooks, outermost first. ``AsyncScheduler._update_after_schedule`` calls the scheduler's
    own first (``super()``), so both lists run under asynchronous scheduling."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    chain(Scheduler, "_update_after_schedule", update_after_schedule)
    chain(AsyncScheduler, "_update_after_schedule", async_update_after_schedule)
    chain(Scheduler, "update_from_output", update_from_output)
    chain(Scheduler, "update_draft_token_ids", update_draft_token_ids)
    chain(Scheduler, "get_grammar_bitmask", get_grammar_bitmask)
