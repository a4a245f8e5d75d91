"""What the launcher, the engine plugin and the API middleware share: environment names, the state
folder's files, and the one definition of mean acceptance length."""

from __future__ import annotations

STATUS_ENV = "DSPARK_STATUS"  # JSON of what dspark-serve switched on and why (its status line, as data)
STATE_DIR_ENV = "DSPARK_STATE_DIR"  # folder the engine process and the API server share while serving
SCHEMA_STATE_FILE = "schemas.json"  # written by the launcher's schema precompile thread
COUNTER_GLOB = "engine-*.counters"  # one memory-mapped counters file per engine process


def mean_acceptance_length(drafts: float, accepted_tokens: float) -> float | None:
    """vLLM's definition: 1 (the token every verification step yields) + accepted draft tokens per draft."""
    return 1.0 + accepted_tokens / drafts if drafts else None
