"""Benchmark scenarios: declarative files plus seeded generators giving messages, schema and ground truth,
or a user's own requests from a dataset file (``scenarios.dataset``).

>>> from dspark_bench.scenarios import load_scenario
>>> sample = load_scenario("order_extraction").sample(1_000_000)
>>> sample.messages, sample.schema, sample.answer
"""

from dspark_bench.scenarios.load import load_all, load_scenario
from dspark_bench.scenarios.spec import (
    Example,
    Mode,
    Sample,
    Scenario,
    ScenarioError,
    Split,
    builtin_names,
    check_schema,
)

__all__ = [
    "Example",
    "Mode",
    "Sample",
    "Scenario",
    "ScenarioError",
    "Split",
    "builtin_names",
    "check_schema",
    "load_all",
    "load_scenario",
]
