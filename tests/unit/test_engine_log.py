"""The engine facts read from a vLLM server's log: real logs of committed GPU runs (an H100, session 55), and lines
of the CPU build's own log. A real CPU server's, end to end: tests/integration/test_cost_only.py."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from dspark_bench.loadtests.deploy.engine_log import EngineFacts, engine_facts

PROBE = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "h100-s55-fullgraph-probe" / "logs"


def _log(arm: str) -> str:
    return gzip.open(PROBE / f"{arm}.log.gz", "rt", encoding="utf-8").read()


@pytest.mark.parametrize(
    ("arm", "mode", "graphs"),
    [
        ("baseline-constrained", "FULL_AND_PIECEWISE", {"FULL": 51, "PIECEWISE": 51}),
        ("baseline-piecewise", "PIECEWISE", {"PIECEWISE": 51}),
        # a graph for every draft length of the load-aware schedule: what a uniform step replays
        ("dspark-ngram", "FULL_AND_PIECEWISE", {"FULL": 545, "PIECEWISE": 72}),
        ("dspark-ngram-full", "FULL", {"FULL": 72}),
    ],
)
def test_a_gpu_servers_log_names_its_runner_graph_mode_and_the_graphs_it_captured(arm, mode, graphs):
    facts = engine_facts(_log(arm))
    assert facts == EngineFacts(runner="V2", cudagraph_mode=mode, graphs=graphs, attention="FLASH_ATTN")
    assert facts.summary().startswith(f"V2 runner; graphs {mode} (")


CPU_LOG = """\
(APIServer pid=3111) INFO 12-07 05:45:28 [api_utils.py:286] non-default args: {'compilation_config': {'cudagraph_mode': <CUDAGraphMode.FULL: 2>}}
(APIServer pid=3111) WARNING 12-07 05:45:28 [vllm.py:1605] Async scheduling not supported with ngram-based speculative decoding and will be disabled.
(APIServer pid=3111) WARNING 12-07 05:45:28 [vllm.py:725] Model Runner V2 requires Triton; using the V1 model runner instead.
(EngineCore pid=3168) INFO 12-07 05:45:34 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='models/tiny-json', compilation_config={'mode': <CompilationMode.NONE: 0>, 'cudagraph_mode': <CUDAGraphMode.NONE: 0>, 'cudagraph_num_of_warmups': 0}
"""


def test_a_cpu_servers_log_says_v1_no_graphs_and_why_asynchronous_scheduling_is_off():
    # the user's mode in the API server's args is not what the engine ran: the engine's own line is
    facts = engine_facts(CPU_LOG)
    assert facts == EngineFacts(runner="V1", cudagraph_mode="NONE",
                                async_off="Async scheduling not supported with ngram-based speculative decoding")  # fmt: skip
    assert facts.summary() == (
        "V1 runner; no CUDA graphs; asynchronous scheduling off (Async scheduling not supported with ngram-based "
        "speculative decoding)"
    )


def test_a_log_that_says_nothing_gives_no_facts():
    assert engine_facts("") == EngineFacts() and EngineFacts().summary() == ""
