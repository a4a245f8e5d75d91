"""A step that verifies no drafts is prepared and sampled as stock vLLM does; one after which the drafter
has nothing to do runs stock vLLM's step end to end.

With speculation configured, vLLM 0.32 builds speculative metadata for every step and samples through
its rejection sampler even when no request has a draft to verify (the speculation gate makes that the
usual step on a workload whose drafts miss). With no drafts the metadata only says "one token per
request, from its last position", which is what stock's plain path computes, and the rejection sampler
only samples the bonus token from the target's logits, which is what the plain sampler does, at more
cost. So such a step is prepared on the plain path (``GPUModelRunner._prepare_inputs`` with the
speculative config hidden for the call) and goes to the plain sampler: same logits positions, same
tokens (greedy), the same [requests, 1] output. A drafter that runs after it (a probe) drafts as after
any step whose drafts were all verified: from the step's tokens, with no rejected ones. Hybrid and
attention-free models keep vLLM's path: their state backends read the per-step draft counts the
speculative path writes.

Where, besides, the drafter has nothing to do after the step (``drafter_idle``: nothing drafts and a
one-pass drafter keeps no request's context), the whole step (``execute_model`` and ``sample_tokens``)
runs with the speculative config hidden: no drafter metadata, no call into the drafter, no copy of an
empty draft tensor, the KV connector finalised with the target's forward as stock vLLM does. On a
workload whose drafts miss that is nearly every step (on the 2-core EPYC, 0.12 ms of a 2.8 ms worker
step at 1 user, by ``studies/probe/step_timer``).
"""

from __future__ import annotations

from dspark_serve.state import CONTEXT_IDS, EngineCounters

HOOKED = (  # the vLLM methods its hooks run on (targets/ installs them)
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner._sample",
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner._prepare_inputs",
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner.execute_model",
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner.sample_tokens",
)
READS = (
    "vllm.v1.spec_decode.metadata:SpecDecodeMetadata",
    "vllm.v1.spec_decode.dflash:DFlashProposer",
    "vllm.v1.core.sched.output:SchedulerOutput.scheduled_spec_decode_tokens",
    "vllm.v1.core.sched.output:SchedulerOutput.num_spec_tokens_to_schedule",
    "vllm.config:ModelConfig.is_hybrid",
    "vllm.config:ModelConfig.is_attention_free",
    "vllm.v1.worker.gpu_model_runner:ExecuteModelState.scheduler_output",  # the step sample_tokens samples
)


def plain_path(runner, scheduler_output) -> bool:
    """Whether this step can be prepared as stock vLLM prepares it: speculation configured, no drafts
    scheduled, and a model whose backends keep no per-step draft state."""
    model_config = runner.model_config
    return (
        runner.speculative_config is not None
        and not scheduler_output.scheduled_spec_decode_tokens
        and not model_config.is_hybrid
        and not model_config.is_attention_free
    )


def drafter_idle(runner, scheduler_output, one_pass: type) -> bool:
    """Whether the drafter has nothing to do after this step: no request drafts after it, and the drafter is
    a one-pass (``one_pass``: DFlash) drafter that keeps no request's context (the speculation gate's
    ``CONTEXT_IDS`` is empty). Any other drafter keeps its own KV cache in step with every token, so it
    always runs."""
    wanted = getattr(scheduler_output, CONTEXT_IDS, None)  # None: every request's context is kept
    return (
        scheduler_output.num_spec_tokens_to_schedule == 0
        and wanted is not None
        and not wanted
        and isinstance(getattr(runner, "drafter", None), one_pass)
    )


def without_speculation(runner, proceed, *args, **kwargs):
    """``proceed`` with the runner's speculative config out of the way, as stock vLLM runs a step."""
    speculative_config, runner.speculative_config = runner.speculative_config, None
    try:
        return proceed(*args, **kwargs)
    finally:
        runner.speculative_config = speculative_config


class StockStepHooks:
    """Hooks on the worker's ``GPUModelRunner`` (``targets.model_runner``). ``counters``: the worker's, where
    the steps run as stock vLLM's are counted (``stock_steps``)."""

    def __init__(self, counters: EngineCounters | None = None) -> None:
        from vllm.v1.spec_decode.dflash import DFlashProposer

        self.counters = counters
        self.one_pass = DFlashProposer

    def stock_step(self, runner, scheduler_output) -> bool:
        return plain_path(runner, scheduler_output) and drafter_idle(runner, scheduler_output, self.one_pass)

    def sample(self, proceed, runner, logits, spec_decode_metadata):
        if spec_decode_metadata is not None and spec_decode_metadata.max_spec_len == 0:
            spec_decode_metadata = None
        return proceed(logits, spec_decode_metadata)

    def prepare_inputs(self, proceed, runner, scheduler_output, *args, **kwargs):
        if not plain_path(runner, scheduler_output):
            return proceed(scheduler_output, *args, **kwargs)
        return without_speculation(runner, proceed, scheduler_output, *args, **kwargs)

    def execute_model(self, proceed, runner, scheduler_output, *args, **kwargs):
        if not self.stock_step(runner, scheduler_output):
            return proceed(scheduler_output, *args, **kwargs)
        if self.counters is not None:
            self.counters.add("stock_steps")
        return without_speculation(runner, proceed, scheduler_output, *args, **kwargs)

    def sample_tokens(self, proceed, runner, *args, **kwargs):
        executed = runner.execute_model_state  # the step execute_model left to sample (None: nothing to sample)
        if executed is None or not self.stock_step(runner, executed.scheduler_output):
            return proceed(*args, **kwargs)
        return without_speculation(runner, proceed, *args, **kwargs)
