"""Benchmark scenarios: declarative files plus seeded generators giving messages, schema and ground truth,
a user's own requests from a dataset file (``scenarios.dataset``), or a trace of requests with their
arrival times (``scenarios.trace``).

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
    Turn,
    builtin_names,
    check_schema,
)
from dspark_bench.scenarios.trace import TraceScenario

__all__ = [
    "Example",
    "Mode",
    "Sample",
    "Scenario",
    "ScenarioError",
    "Split",
    "Turn",
    "TraceScenario",
    "builtin_names",
    "check_schema",
    "load_all",
    "load_scenario",
]
