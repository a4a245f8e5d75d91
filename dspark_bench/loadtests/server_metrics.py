"""Scrape a vLLM server's Prometheus ``/metrics`` around each level and report counter deltas."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def mean_acceptance_length(drafts: float, accepted_tokens: float) -> float | None:
    """vLLM's definition (as its spec-decode logger): 1 (the token every verification step yields) + accepted
    draft tokens per draft. The harness reads any server's counters, dspark-serve installed or not."""
    return 1.0 + accepted_tokens / drafts if drafts else None


# Counters worth reporting beside client-side numbers (vLLM v1 names; the DSpark patch adds its own).
TRACKED = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:generation_tokens",
    "vllm:prompt_tokens",
    "dspark_grammar_forced_tokens",  # the DSpark patch's: tokens its grammar pinned to one choice
    "dspark_constrained_tokens",  # ... out of the tokens generated under a grammar
    "dspark_grammar_draft_tokens",  # drafts of the grammar's forced text, verified
    "dspark_grammar_drafts_accepted",  # ... and accepted: output tokens that came from them
    "dspark_repeat_draft_tokens",  # drafts repeating the request's own text, verified
    "dspark_repeat_drafts_accepted",  # ... and accepted
    "dspark_engine_steps",  # engine steps that ran the model
    "dspark_drafter_steps",  # ... after which the drafter ran: what speculation costs where nothing lands
    "dspark_probe_steps",  # ... of those, runs only to see whether a request's drafts land (none asked)
    "dspark_async_steps",  # ... scheduled asynchronously (the acceptance cap cut draft placeholders)
    "dspark_plain_steps",  # ... the governor ran with speculation off (it measured plain steps faster)
    "dspark_governor_switches",  # the governor turning speculation off or on again
    "dspark_async_forced_tokens",  # forced-text tokens sent to the worker's drafts under asynchronous scheduling
    "dspark_async_structure_tokens",  # ... and the structure memory's predictions sent there
    "dspark_engine_hook_us",  # microseconds the patch's own hooks took in the engine core
    "dspark_worker_hook_us",  # ... and in the worker
)
# The patch's own time per vLLM method it wraps (label "method"): each kept as "dspark_hook_us:<Class.method>"
BY_METHOD = "dspark_hook_us"
# Gauges: the level's last value, not a difference (the DSpark gate's step costs as it measured them, which
# its choices to draft or not were made from).
GAUGES = (
    "dspark_step_fixed_us",
    "dspark_step_per_position_us",
    "dspark_drafter_pass_us",
    "dspark_drafts_pay_to_batch",
)


_UNREADABLE: set[str] = set()  # servers already reported as having no readable /metrics


def scrape(base_url: str, headers: dict[str, str] | None = None, timeout: float = 5.0) -> dict[str, float] | None:
    """Tracked counters summed over their label sets, and tracked gauges; None if the endpoint has no /metrics."""
    try:
        response = httpx.get(f"{base_url}/metrics", headers=headers or {}, timeout=timeout)
        response.raise_for_status()
    except httpx.HTTPError:
        return None
    totals: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(response.text):
            if family.name in GAUGES and family.samples:
                totals[family.name] = max(sample.value for sample in family.samples)
            elif family.name == BY_METHOD:  # one total per wrapped method, kept apart
                for sample in family.samples:
                    if sample.name.endswith("_total") and (method := sample.labels.get("method")):
                        totals[f"{BY_METHOD}:{method}"] = totals.get(f"{BY_METHOD}:{method}", 0.0) + sample.value
            elif family.name in TRACKED:
                for sample in family.samples:
                    if sample.name.endswith("_total"):
                        totals[family.name] = totals.get(family.name, 0.0) + sample.value
    except (ValueError, TypeError, IndexError) as exc:  # a gateway's page, JSON...: not Prometheus text
        if base_url not in _UNREADABLE:
            _UNREADABLE.add(base_url)
            print(
                f"  note: {base_url}/metrics is not Prometheus text ({type(exc).__name__}); server counters "
                "(speculation, prefix cache) are left out for this arm",
                flush=True,
            )
        return None
    return totals


def delta(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float]:
    if before is None or after is None:
        return {}
    out = {name: after[name] if name in GAUGES else after[name] - before.get(name, 0.0) for name in after}
    drafts, accepted = out.get("vllm:spec_decode_num_drafts"), out.get("vllm:spec_decode_num_accepted_tokens")
    if (mean := mean_acceptance_length(drafts or 0.0, accepted or 0.0)) is not None:
        out["mean_acceptance_length"] = mean
    forced, constrained = out.get("dspark_grammar_forced_tokens"), out.get("dspark_constrained_tokens")
    if constrained:
        out["grammar_forced_share"] = (forced or 0.0) / constrained
    if generated := out.get("vllm:generation_tokens"):
        for source in ("grammar", "repeat"):  # output tokens that came from the engine core's drafts, by source
            if (landed := out.get(f"dspark_{source}_drafts_accepted")) is not None:
                out[f"{source}_draft_share"] = landed / generated
    if steps := out.get("dspark_engine_steps"):  # where the gate and the governor left speculation off
        for kind in ("drafter", "plain"):
            if (counted := out.get(f"dspark_{kind}_steps")) is not None:
                out[f"{kind}_step_share"] = counted / steps
        for side in ("engine", "worker"):  # the patch's own Python a step, beside what a step cost
            if (micro := out.get(f"dspark_{side}_hook_us")) is not None:
                out[f"{side}_hook_us_per_step"] = micro / steps
        for name in [name for name in out if name.startswith(f"{BY_METHOD}:")]:  # ... and where it went
            out[f"hook_us_per_step:{name.split(':', 1)[1]}"] = out[name] / steps
    queries, hits = out.get("vllm:prefix_cache_queries"), out.get("vllm:prefix_cache_hits")
    if queries:
        out["prefix_cache_hit_rate"] = (hits or 0.0) / queries
    return out
