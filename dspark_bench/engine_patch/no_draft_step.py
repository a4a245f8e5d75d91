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

from dspark_bench.engine_patch.state import CONTEXT_IDS, EngineCounters

REPLACES = (
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


def install(counters: EngineCounters | None = None) -> None:
    """``counters``: the worker's, where the steps run as stock vLLM's are counted (``stock_steps``)."""
    from vllm.v1.spec_decode.dflash import DFlashProposer
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    if getattr(GPUModelRunner._sample, "_dspark", False):
        return
    sample, prepare_inputs = GPUModelRunner._sample, GPUModelRunner._prepare_inputs
    execute_model, sample_tokens = GPUModelRunner.execute_model, GPUModelRunner.sample_tokens

    def without_speculation(runner, call, *args, **kwargs):
        speculative_config, runner.speculative_config = runner.speculative_config, None
        try:
            return call(runner, *args, **kwargs)
        finally:
            runner.speculative_config = speculative_config

    def plain_without_drafts(self, logits, spec_decode_metadata):
        if spec_decode_metadata is not None and spec_decode_metadata.max_spec_len == 0:
            spec_decode_metadata = None
        return sample(self, logits, spec_decode_metadata)

    def prepared_plain_without_drafts(self, scheduler_output, *args, **kwargs):
        if not plain_path(self, scheduler_output):
            return prepare_inputs(self, scheduler_output, *args, **kwargs)
        return without_speculation(self, prepare_inputs, scheduler_output, *args, **kwargs)

    def stock_step(runner, scheduler_output) -> bool:
        return plain_path(runner, scheduler_output) and drafter_idle(runner, scheduler_output, DFlashProposer)

    def stock_when_drafter_idle(self, scheduler_output, *args, **kwargs):
        if not stock_step(self, scheduler_output):
            return execute_model(self, scheduler_output, *args, **kwargs)
        if counters is not None:
            counters.add("stock_steps")
        return without_speculation(self, execute_model, scheduler_output, *args, **kwargs)

    def sampled_as_executed(self, *args, **kwargs):
        executed = self.execute_model_state  # the step execute_model left to sample (None: nothing to sample)
        if executed is None or not stock_step(self, executed.scheduler_output):
            return sample_tokens(self, *args, **kwargs)
        return without_speculation(self, sample_tokens, *args, **kwargs)

    plain_without_drafts._dspark = True  # type: ignore[attr-defined]
    GPUModelRunner._sample = plain_without_drafts
    GPUModelRunner._prepare_inputs = prepared_plain_without_drafts
    GPUModelRunner.execute_model = stock_when_drafter_idle
    GPUModelRunner.sample_tokens = sampled_as_executed
