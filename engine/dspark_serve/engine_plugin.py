"""DSpark inside vLLM's engine processes, loaded through vLLM's ``vllm.general_plugins`` entry point.

It does nothing unless ``dspark-serve`` started the server with DSpark on (``engine_config.ENGINE_ENV`` in the
environment), so stock vLLM servers on the same installation are untouched. The features are plain classes;
their hooks go on vLLM's methods through one module per vLLM class (``targets/``), each method one wrapper
calling the hook list written below, outermost first (``hooks.chain``). ``TOUCHPOINTS`` is the one list a
vLLM upgrade has to check: what the targets replace and what the features read. Each must exist
(``tests/unit/test_engine_patch_plugin.py``), and each function or class must have the signature and source
recorded in ``vllm_fingerprints.json`` (``fingerprints``, ``tests/unit/test_engine_patch_fingerprints.py``).

- ``grammar_counter``: counts grammar-forced tokens (structured-output manager, scheduler);
- ``speculation_gate``: drafts only where they pay, per request (scheduler, engine core), and, by the
  ``governor``'s measured tokens per second per batch size, only while speculating is faster than not;
- ``engine_drafts``: drafts made in the engine core without a drafter pass, of the text each request
  repeats (``repeat_drafts``) and of the text its grammar forces (``grammar_drafts``), both on by default;
  under asynchronous scheduling the forced text goes to the worker's drafts instead (``async_grammar_drafts``),
  and, for the GPU's prompt copy, the JSON structure memory's predictions too (``structure_lookahead``);
- ``no_draft_step``: a step with no drafts to verify samples as stock vLLM does (worker);
- ``draft_handoff``: a step's drafts come back with its sampled tokens, not in a round trip of their own;
- ``dflash_fixes``: the one-pass drafter's exact K-norm on the CPU, and no forward pass at 0 drafts;
- ``full_graphs``: each uniform decode step on a full CUDA graph of its own query length (V2 runner, worker).
"""

from __future__ import annotations

from dspark_serve import (
    async_grammar_drafts,
    dflash_fixes,
    draft_handoff,
    engine_drafts,
    full_graphs,
    grammar_counter,
    grammar_drafts,
    installed_vllm,
    no_draft_step,
    repeat_drafts,
    require_supported_vllm,
    speculation_gate,
    structure_lookahead,
)
from dspark_serve.acceptance import StepCosts, prior_draft_cost
from dspark_serve.engine_config import EngineConfig
from dspark_serve.governor import Governor
from dspark_serve.hooks import CLOCK, present
from dspark_serve.state import COUNTERS, engine_counters
from dspark_serve.targets import TARGETS, dflash, engine_core, model_runner, model_runner_v2, scheduler, structured_output

FEATURES = (
    grammar_counter,
    speculation_gate,
    engine_drafts,
    grammar_drafts,
    async_grammar_drafts,
    structure_lookahead,
    no_draft_step,
    dflash_fixes,
    draft_handoff,
    full_graphs,
)
TOUCHPOINTS: dict[str, tuple[str, ...]] = {
    **{module.__name__.rsplit(".", 1)[1]: tuple(module.REPLACES) for module in TARGETS},
    **{module.__name__.rsplit(".", 1)[1]: tuple(getattr(module, "READS", ())) for module in FEATURES},
}


def register() -> None:
    """vLLM calls this in each of its processes; only the engine process schedules and builds grammar
    bitmasks, only the worker runs drafters, so each hook acts only where its code runs."""
    config = EngineConfig.from_env()
    if config is None:
        return
    # Every hook below is written against one vLLM release's code: on another the server must not start
    # half-patched. The exception ends vLLM's process with the message (plugins are not guarded).
    require_supported_vllm(installed_vllm())
    install(config)


def install(config: EngineConfig) -> None:
    """Every hook list of ``config``'s features, outermost first, in one place."""
    counters = engine_counters(config.state_dir)
    # A method with no slot of its own (a runner class not in HOOKED_METHODS) counts in its side's total only
    CLOCK.sink = lambda counter, micro: counters.add(counter, micro) if counter in COUNTERS else None
    counting = grammar_counter.CountingHooks(grammar_counter.GrammarForcedCounter(counters))
    structured_output.install(grammar_bitmask=[counting.grammar_bitmask])
    if not config.speculating:  # nothing to gate, hand off or draft
        for target in (engine_core, model_runner, model_runner_v2, dflash):
            target.install()
        scheduler.install(update_from_output=[counting.update_from_output])
        return

    fixes = dflash_fixes.DFlashFixHooks() if config.drafter == "dflash" else None
    stock = no_draft_step.StockStepHooks(counters)
    handoff = draft_handoff.HandoffHooks(draft_handoff.Handoff(counters)) if config.draft_handoff else None
    gate = None
    if config.acceptance_cap:
        costs = StepCosts(draft_prior=prior_draft_cost(config.drafter))
        governor = Governor() if config.governor else None
        gate = speculation_gate.SpeculationGate(counters, costs=costs, governor=governor, uniform=config.uniform_drafts)
    gated = speculation_gate.GateHooks(gate) if gate is not None else None
    verify_cost = (lambda: gate.relative_costs[0]) if gate is not None else (lambda: 0.0)
    repeat = repeat_drafts.RepeatDrafter(counters, verify_cost) if config.repeat_drafts else None
    forced = grammar_drafts.GrammarDrafter(counters, verify_cost) if config.grammar_drafts else None
    speculating = (lambda: gate.speculating) if gate is not None else (lambda: True)
    # The structure memory's predictions stand in for the structure drafter where the GPU's prompt copy drafts
    lookahead = structure_lookahead.StructureLookahead() if config.structure_lookahead and config.drafter == "ngram_gpu" else None
    forced_texts = overlay = None
    if forced is not None or lookahead is not None:
        # Sent only where the worker's next drafts will be verified: the gate plans that step before the bitmask
        drafting = (lambda: gate.drafting) if gate is not None else (lambda: True)

        def budget() -> float | None:  # a share of a plain step as the gate measured it; no bound before it has
            seconds = gate.plain_step_seconds() if gate is not None else None
            return None if seconds is None else async_grammar_drafts.FORCED_SHARE * seconds

        forced_texts = async_grammar_drafts.ForcedTexts(forced, drafting, lookahead, counters, budget)
        overlay = async_grammar_drafts.ForcedOverlay()
    drafts = None
    if repeat is not None or forced is not None:
        drafts = engine_drafts.EngineDraftHooks(
            repeat,
            forced,
            gate.rate if gate is not None else (lambda request_id: 1.0),
            speculating,
        )

    def hook(feature: object | None, name: str):
        return getattr(feature, name) if feature is not None else None

    # Engine core: the engine drafts are made after the gate has seen the step, and the handoff, innermost,
    # stands for vLLM's own fetch of the worker's drafts.
    engine_core.install(post_step=present(hook(drafts, "post_step"), hook(gated, "post_step"), hook(handoff, "post_step")))
    scheduler.install(
        update_after_schedule=present(hook(gated, "update_after_schedule")),
        async_update_after_schedule=present(hook(gated, "async_update_after_schedule")),
        update_from_output=present(
            counting.update_from_output,
            hook(drafts, "update_from_output"),
            hook(gated, "update_from_output"),
            hook(handoff, "update_from_output"),
        ),
        update_draft_token_ids=present(hook(gated, "update_draft_token_ids")),
        get_grammar_bitmask=present(hook(forced_texts, "get_grammar_bitmask")),
    )
    # Worker: the handoff takes the drafts from what the step, run as stock vLLM's where nothing drafts, sampled.
    model_runner.install(
        sample=[stock.sample],
        prepare_inputs=[stock.prepare_inputs],
        execute_model=[stock.execute_model],
        sample_tokens=present(hook(handoff, "sample_tokens"), stock.sample_tokens),
        propose_draft_token_ids=present(hook(fixes, "propose_draft_token_ids")),
    )
    graphs = full_graphs.FullGraphHooks() if config.full_graphs else None
    model_runner_v2.install(
        sample_tokens=present(hook(overlay, "sample_tokens")), init_candidates=present(hook(graphs, "init_candidates"))
    )
    cpu_fixes = fixes if fixes is not None and fixes.cpu else None
    dflash.install(
        propose=present(hook(fixes, "propose")),
        greedy_sample=present(hook(cpu_fixes, "greedy_sample")),
        normalize_context_k=present(hook(cpu_fixes, "normalize_context_k")),
    )


def uninstall() -> None:
    """vLLM's own methods back on every target (tests, and a process that turns DSpark off)."""
    for target in TARGETS:
        target.install()
    CLOCK.sink = None
