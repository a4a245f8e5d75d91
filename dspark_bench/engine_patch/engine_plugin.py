"""DSpark inside vLLM's engine processes, loaded through vLLM's ``vllm.general_plugins`` entry point.

It does nothing unless ``dspark-serve`` started the server with DSpark on (``DSPARK_STATUS`` and
``DSPARK_STATE_DIR`` in the environment), so stock vLLM servers on the same installation are untouched.
Each module below replaces named internals of the supported vLLM (its ``REPLACES``) and reads others
(its ``READS``); ``TOUCHPOINTS`` is the one list a vLLM upgrade has to check, and
``tests/unit/test_engine_patch_plugin.py`` checks it against the installed vLLM:

- ``grammar_counter``: counts grammar-forced tokens (structured-output manager);
- ``speculation_gate``: drafts only where they pay, per request (scheduler, engine core);
- ``engine_drafts``: drafts made in the engine core without a drafter pass, of the text each request
  repeats (``repeat_drafts``) and of the text its grammar forces (``grammar_drafts``), both on by default;
- ``no_draft_step``: a step with no drafts to verify samples as stock vLLM does (worker);
- ``draft_handoff``: a step's drafts come back with its sampled tokens, not in a round trip of their own;
- ``dflash_fixes``: the one-pass drafter's exact K-norm on the CPU, and no forward pass at 0 drafts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dspark_bench.engine_patch import (
    dflash_fixes,
    draft_handoff,
    engine_drafts,
    grammar_counter,
    grammar_drafts,
    no_draft_step,
    repeat_drafts,
    speculation_gate,
)
from dspark_bench.engine_patch.state import GATE_ENV, STATE_DIR_ENV, STATUS_ENV, engine_counters

GRAMMAR_DRAFTS_ENV = "DSPARK_GRAMMAR_DRAFTS"  # "0": no drafts of the text the request's grammar forces
REPEAT_DRAFTS_ENV = "DSPARK_REPEAT_DRAFTS"  # "0": no drafts of the request's own repeated text
HANDOFF_ENV = "DSPARK_DRAFT_HANDOFF"  # "0": the engine core asks for each step's drafts, as vLLM does
TOUCHPOINTS: dict[str, tuple[str, ...]] = {
    module.__name__.rsplit(".", 1)[1]: (*getattr(module, "REPLACES", ()), *getattr(module, "READS", ()))
    for module in (grammar_counter, speculation_gate, engine_drafts, grammar_drafts, no_draft_step, dflash_fixes, draft_handoff)
}


def register() -> None:
    """vLLM calls this in each of its processes; only the engine process schedules and builds grammar
    bitmasks, only the worker runs drafters, so each replacement acts only where its code runs."""
    state_dir = os.environ.get(STATE_DIR_ENV)
    facts = json.loads(os.environ.get(STATUS_ENV) or "{}")
    if not facts.get("enabled") or not state_dir or not Path(state_dir).is_dir():
        return
    counters = engine_counters(state_dir)
    if facts.get("drafter") == "dflash":
        dflash_fixes.install()
    if facts.get("drafter", "off") != "off":
        no_draft_step.install(counters)
        if os.environ.get(HANDOFF_ENV, "1") != "0":
            draft_handoff.install(draft_handoff.Handoff(counters))  # first: the gate's and engine_drafts' hooks wrap it
        gate = None
        if os.environ.get(GATE_ENV, "1") != "0":
            gate = speculation_gate.SpeculationGate(counters)
            speculation_gate.install(gate)
        verify_cost = (lambda: gate.relative_costs[0]) if gate is not None else (lambda: 0.0)
        learned_rate = gate.rate if gate is not None else (lambda request_id: 1.0)
        engine_drafts.install(
            repeat_drafts.RepeatDrafter(counters, verify_cost) if os.environ.get(REPEAT_DRAFTS_ENV, "1") != "0" else None,
            grammar_drafts.GrammarDrafter(counters, verify_cost) if os.environ.get(GRAMMAR_DRAFTS_ENV, "1") != "0" else None,
            learned_rate,
        )
    grammar_counter.install(grammar_counter.GrammarForcedCounter(counters))
