"""Hand-made run results for report and gate tests: levels written as a results.json of schema 1 wrote
them (health facts such as ``level_problems`` among the metrics), read through the real loader."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from dspark_bench.loadtests.metrics import level_metrics
from dspark_bench.loadtests.results import RunResults

NO_METRICS = asdict(level_metrics([]))  # every metric of a level, at its value for no requests


def made_run(levels: list[dict[str, Any]], **top: Any) -> RunResults:
    """``levels`` (each with any subset of metrics) and top-level keys (complete, config, arms...) as typed results."""
    rows = [{"mode": "json_object", "repeat": 0, **level, "metrics": {**NO_METRICS, **level.get("metrics", {})}} for level in levels]
    return RunResults.from_dict({"complete": True, **top, "levels": rows})
