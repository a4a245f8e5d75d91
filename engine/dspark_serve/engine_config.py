"""The engine patch's configuration, typed: what ``dspark-serve`` decided, handed to vLLM's engine and worker
processes as one JSON variable (``ENGINE_ENV``; vLLM starts those processes, so the environment is the one
way in). The engine plugin and the drafters read this and no other variable.

Users switch features off by dspark-serve's flags (``--no-dspark-repeat-drafts``, ``flags.FEATURE_FLAGS``) or
in its environment (``SWITCHES``: "0" off, "1" on; a flag wins); the launcher reads them once, and refuses a
value that is neither.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass

ENGINE_ENV = "DSPARK_ENGINE"
# Draft positions one verification step may hold before drafts shrink, over all requests: a bound, within
# which the speculation gate's measured step costs cut drafts (serve.verify_budget); BUDGET_ENV sets another.
DEFAULT_VERIFY_BUDGET = 1024
BUDGET_ENV = "DSPARK_VERIFY_BUDGET"

# EngineConfig field -> the variable a user sets on dspark-serve to turn that feature off ("0")
SWITCHES = {
    "repeat_drafts": "DSPARK_REPEAT_DRAFTS",  # drafts of the request's own repeated text (repeat_drafts)
    "grammar_drafts": "DSPARK_GRAMMAR_DRAFTS",  # drafts of the text the request's grammar forces (grammar_drafts)
    "draft_handoff": "DSPARK_DRAFT_HANDOFF",  # drafts come back with the step's output (draft_handoff)
    "acceptance_cap": "DSPARK_ACCEPTANCE_CAP",  # verify only the drafts that pay, per request (speculation_gate)
    "governor": "DSPARK_GOVERNOR",  # speculate only while it measures faster than not (governor)
    "uniform_drafts": "DSPARK_UNIFORM_DRAFTS",  # asynchronous scheduling: one draft length per step (speculation_gate)
    "structure_lookahead": "DSPARK_STRUCTURE_LOOKAHEAD",  # ngram_gpu: JSON structure drafts one step late (structure_lookahead)
    "full_graphs": "DSPARK_FULL_GRAPHS",  # V2 runner: each uniform step on a full CUDA graph of its length (full_graphs)
}


class SwitchError(ValueError):
    """A switch with a value other than 0 or 1; the message says which and how to fix it."""


@dataclass(frozen=True)
class EngineConfig:
    """What the engine processes do. ``drafter``: the speculative method dspark-serve chose ("off": none)."""

    drafter: str
    state_dir: str  # the folder the engine processes and the API server share while serving
    verify_budget: int = DEFAULT_VERIFY_BUDGET
    repeat_drafts: bool = True
    grammar_drafts: bool = True
    draft_handoff: bool = True
    acceptance_cap: bool = True
    governor: bool = True
    uniform_drafts: bool = True
    structure_lookahead: bool = True
    full_graphs: bool = True

    @property
    def speculating(self) -> bool:
        return self.drafter != "off"

    def to_env(self) -> dict[str, str]:
        return {ENGINE_ENV: json.dumps(asdict(self), sort_keys=True)}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EngineConfig | None:
        """The launcher's config; None in a process dspark-serve did not start (a stock vLLM server)."""
        text = (os.environ if environ is None else environ).get(ENGINE_ENV)
        if not text:
            return None
        return cls(**json.loads(text))


def switches(environ: Mapping[str, str]) -> dict[str, bool]:
    """The features' switches from dspark-serve's environment (unset: on). Raises SwitchError on a value
    other than 0 or 1."""
    found = {}
    for name, variable in SWITCHES.items():
        value = environ.get(variable, "1").strip()
        if value not in ("0", "1"):
            raise SwitchError(f"{variable}={value!r} is not 0 or 1; fix: {variable}=0 turns it off, unset it to leave it on")
        found[name] = value == "1"
    return found
