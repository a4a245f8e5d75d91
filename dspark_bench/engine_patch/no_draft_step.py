"""A step that verifies no drafts is prepared and sampled as stock vLLM does.

With speculation configured, vLLM 0.32 builds speculative metadata for every step and samples through
its rejection sampler even when no request has a draft to verify (the speculation gate makes that the
usual step on a workload whose drafts miss). With no drafts the metadata only says "one token per
request, from its last position", which is what stock's plain path computes, and the rejection sampler
only samples the bonus token from the target's logits, which is what the plain sampler does, at more
cost. So such a step is prepared on the plain path (``GPUModelRunner._prepare_inputs`` with the
speculative config hidden for the call: the one place it reads it) and goes to the plain sampler: same
logits positions, same tokens (greedy), the same [requests, 1] output. A drafter that runs after it
(a probe) drafts as after any step whose drafts were all verified: from the step's tokens, with no
rejected ones. Hybrid and attention-free models keep vLLM's path: their state backends read the
per-step draft counts the speculative path writes.
"""

from __future__ import annotations

REPLACES = (
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner._sample",
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner._prepare_inputs",
)
READS = (
    "vllm.v1.spec_decode.metadata:SpecDecodeMetadata",
    "vllm.v1.core.sched.output:SchedulerOutput.scheduled_spec_decode_tokens",
    "vllm.config:ModelConfig.is_hybrid",
    "vllm.config:ModelConfig.is_attention_free",
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


def install() -> None:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    if getattr(GPUModelRunner._sample, "_dspark", False):
        return
    sample, prepare_inputs = GPUModelRunner._sample, GPUModelRunner._prepare_inputs

    def plain_without_drafts(self, logits, spec_decode_metadata):
        if spec_decode_metadata is not None and spec_decode_metadata.max_spec_len == 0:
            spec_decode_metadata = None
        return sample(self, logits, spec_decode_metadata)

    def prepared_plain_without_drafts(self, scheduler_output, *args, **kwargs):
        if not plain_path(self, scheduler_output):
            return prepare_inputs(self, scheduler_output, *args, **kwargs)
        speculative_config, self.speculative_config = self.speculative_config, None
        try:
            return prepare_inputs(self, scheduler_output, *args, **kwargs)
        finally:
            self.speculative_config = speculative_config

    plain_without_drafts._dspark = True  # type: ignore[attr-defined]
    GPUModelRunner._sample = plain_without_drafts
    GPUModelRunner._prepare_inputs = prepared_plain_without_drafts
