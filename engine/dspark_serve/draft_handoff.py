"""A step's drafts reach the engine core with its sampled tokens, not through a second round trip.

vLLM 0.32's synchronous engine core (the CPU's) asks the worker for a step's drafts after the step
(``EngineCore.post_step`` -> ``take_draft_token_ids``): one more request and reply through the executor's
message queues, 1.4 ms of a 28.5 ms step at 8 users on order_extraction with server processes sharing one
core (2-core AVX-512 EPYC, ``studies/probe/step_timer``). The worker already holds those drafts when its
``sample_tokens`` returns, and runs nothing between that and the request for them; so it sends them in the
output it returns (``CARRIED``, kept by pickling with the output), and the engine core takes them from
there. Where an output comes without them (an empty step's shared output, another executor's path), the
engine core asks as vLLM does. Async scheduling (the GPU's) hands drafts over in the worker and is untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dspark_serve.state import EngineCounters

HOOKED = (  # the vLLM methods its hooks run on (targets/ installs them)
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner.sample_tokens",
    "vllm.v1.core.sched.scheduler:Scheduler.update_from_output",
    "vllm.v1.engine.core:EngineCore.post_step",
)
READS = (
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner.take_draft_token_ids",
    "vllm.v1.outputs:EMPTY_MODEL_RUNNER_OUTPUT",
    "vllm.v1.outputs:ModelRunnerOutput",
    "vllm.v1.core.sched.scheduler:Scheduler.update_draft_token_ids",
)
CARRIED = "dspark_draft_token_ids"  # ModelRunnerOutput attribute (worker -> engine core): the step's drafts
NOT_CARRIED = object()


def carry(output: Any, take: Callable[[], Any], output_type: type, shared: Any) -> Any:
    """``output`` with the step's drafts (``take()``) on it; vLLM's one shared empty output, and anything
    but a plain ModelRunnerOutput, left as they are (the engine core then asks for the drafts)."""
    if type(output) is output_type and output is not shared:
        setattr(output, CARRIED, take())
    return output


@dataclass
class Handoff:
    """The drafts the last step's output brought, until the engine core's ``post_step`` hands them on."""

    counters: EngineCounters | None = None
    drafts: Any = NOT_CARRIED

    def arrived(self, model_runner_output: Any) -> None:
        self.drafts = getattr(model_runner_output, CARRIED, NOT_CARRIED)

    def post_step(self, engine: Any, model_executed: bool, ask: Callable[[Any, bool], None]) -> None:
        """vLLM's post_step (``ask``), without its round trip where the step's output brought the drafts."""
        drafts, self.drafts = self.drafts, NOT_CARRIED
        fetches = model_executed and engine.check_for_draft_tokens and not engine.async_scheduling  # vLLM's own test
        carried = fetches and drafts is not NOT_CARRIED and getattr(engine, "batch_queue", None) is None
        if self.counters is not None and fetches:
            self.counters.add("carried_draft_steps" if carried else "fetched_draft_steps")
        if not carried:
            ask(engine, model_executed)
        elif drafts is not None:
            engine.scheduler.update_draft_token_ids(drafts)


class HandoffHooks:
    """The handoff's hooks: the worker's ``sample_tokens`` (``targets.model_runner``) carries the drafts, the
    scheduler's ``update_from_output`` notes them, the engine core's ``post_step`` hands them on in place of
    vLLM's round trip (innermost of its list: it stands for vLLM's own call)."""

    def __init__(self, handoff: Handoff) -> None:
        from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput

        self.handoff = handoff
        self.output_type, self.shared_output = ModelRunnerOutput, EMPTY_MODEL_RUNNER_OUTPUT

    def sample_tokens(self, proceed, runner, *args, **kwargs):
        output = proceed(*args, **kwargs)
        if runner.use_async_scheduling:
            return output
        return carry(output, runner.take_draft_token_ids, self.output_type, self.shared_output)

    def update_from_output(self, proceed, scheduler, scheduler_output, model_runner_output):
        self.handoff.arrived(model_runner_output)
        return proceed(scheduler_output, model_runner_output)

    def post_step(self, proceed, engine, model_executed):
        self.handoff.post_step(engine, model_executed, lambda _engine, executed: proceed(executed))
