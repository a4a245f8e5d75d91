"""A step that verifies no drafts samples as stock vLLM does.

With speculation configured, vLLM 0.32 builds speculative metadata for every step and samples through
its rejection sampler even when no request has a draft to verify (the speculation gate makes that the
usual step on a workload whose drafts miss). With no drafts the rejection sampler only samples the
bonus token from the target's logits, which is what the plain sampler does, at more cost. So such a
step goes to the plain sampler: same tokens (greedy) and the same [requests, 1] output.
"""

from __future__ import annotations

REPLACES = ("vllm.v1.worker.gpu_model_runner:GPUModelRunner._sample",)
READS = ("vllm.v1.spec_decode.metadata:SpecDecodeMetadata",)


def install() -> None:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    if getattr(GPUModelRunner._sample, "_dspark", False):
        return
    sample = GPUModelRunner._sample

    def plain_without_drafts(self, logits, spec_decode_metadata):
        if spec_decode_metadata is not None and spec_decode_metadata.max_spec_len == 0:
            spec_decode_metadata = None
        return sample(self, logits, spec_decode_metadata)

    plain_without_drafts._dspark = True  # type: ignore[attr-defined]
    GPUModelRunner._sample = plain_without_drafts
