"""How a vLLM server says it runs, read from its own start-up log: the model runner, the CUDA graph mode and the
graphs it captured, the attention backend, and whether it turned asynchronous scheduling off and why.

Two arms of one run can differ there without a flag saying so: on a GPU vLLM 0.32 serves ``ngram_gpu`` and
``dflash`` speculation on its V2 model runner and ``custom_class`` on V1, and it overrides the graph mode or
asynchronous scheduling for some speculative configs (benchmarks/gpu/RESULTS.md, session 55). The facts go
beside each arm in ``results.json``, the printed summary and the report. Pure: a log's text in, facts out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_V2 = re.compile(r"Using V2 Model Runner")
_V1 = re.compile(r"using the V1 model runner instead")
_ENGINE_LINE = re.compile(r"Initializing a V1 LLM engine.*")
_GRAPH_MODE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)")
_CAPTURED = re.compile(r"Capturing CUDA graphs \((\w+)\):\s*100%\|[^|]*\|\s*(\d+)/\d+")
_ATTENTION = re.compile(r"Using (\w+) attention backend")
_ASYNC_OFF = re.compile(r"(Async scheduling not supported with [^\n]*?) and will be disabled")


@dataclass(frozen=True)
class EngineFacts:
    """What one server's log says; None (or empty) where it says nothing, e.g. a server this run did not start."""

    runner: str | None = None  # "V2" or "V1": vLLM's model runner in the worker
    cudagraph_mode: str | None = None  # as the engine started with it, after vLLM's own overrides
    graphs: dict[str, int] = field(default_factory=dict)  # CUDA graphs captured, by mode ("FULL", "PIECEWISE")
    attention: str | None = None  # the attention backend
    async_off: str | None = None  # vLLM's reason, where it turned asynchronous scheduling off

    def summary(self) -> str:
        """One line, e.g. "V2 runner; graphs FULL_AND_PIECEWISE (545 full, 72 piecewise); FLASH_ATTN"; "" if unknown."""
        parts = []
        if self.runner:
            parts.append(f"{self.runner} runner")
        if self.cudagraph_mode == "NONE":
            parts.append("no CUDA graphs")
        elif self.cudagraph_mode:
            captured = ", ".join(f"{count} {mode.lower()}" for mode, count in sorted(self.graphs.items()))
            parts.append(f"graphs {self.cudagraph_mode}" + (f" ({captured})" if captured else ""))
        if self.attention:
            parts.append(self.attention)
        if self.async_off:
            parts.append(f"asynchronous scheduling off ({self.async_off})")
        return "; ".join(parts)


def engine_facts(log: str) -> EngineFacts:
    """The facts of a server's log text (its start-up is enough)."""
    runner = None
    if _V2.search(log):
        runner = "V2"
    elif _V1.search(log):
        runner = "V1"
    engine_lines = _ENGINE_LINE.findall(log)
    modes = _GRAPH_MODE.findall(engine_lines[-1]) if engine_lines else []
    graphs: dict[str, int] = {}
    for mode, count in _CAPTURED.findall(log):  # a profiling pass captures a sample first: the largest count is the real one
        graphs[mode] = max(graphs.get(mode, 0), int(count))
    attention = _ATTENTION.findall(log)
    async_off = _ASYNC_OFF.findall(log)
    return EngineFacts(
        runner=runner,
        cudagraph_mode=modes[-1] if modes else None,
        graphs=graphs,
        attention=attention[-1] if attention else None,
        async_off=async_off[-1] if async_off else None,
    )
