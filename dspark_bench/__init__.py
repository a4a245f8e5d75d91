"""dspark-bench: fast structured (JSON) output for vLLM, and the paired load-test harness that proves it.

Subpackages, each with one role (dependencies point down this list, never up):
- ``cli``: the ``dspark-bench`` command (bench, report, gate, ui);
- ``reports``: tables, the HTML page and CI gates, read from a run's results.json and records;
- ``loadtests``: deploy the arms, drive them with Locust, validate, record, measure;
- ``scenarios``: what is asked: messages, JSON Schema and ground truth per request;

The DSpark engine patch is its own distribution, ``dspark-serve`` (``engine/``, import name ``dspark_serve``):
it imports nothing of this package, and this package needs it only to start local DSpark arms.
"""
