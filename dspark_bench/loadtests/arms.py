"""The arms of a comparison, as data: the builtin arms, the reference arm every ratio is taken against,
and the ceiling arm. How an arm becomes a running server is ``deploy.servers``'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from dspark_bench.scenarios import Mode


@dataclass(frozen=True)
class Arm:
    """One side of the comparison: how its server starts and how requests ask for JSON."""

    name: str
    description: str
    server_args: tuple[str, ...] = ()
    launcher: str = "vllm"  # "vllm" (stock OpenAI server), "dspark" (the engine patch), or a command line
    mode: Mode | None = None  # forces a mode (baseline: prompt only); None = the run's mode
    primed: bool = False  # sent every prompt of the run once before the sweep (a replay drafter then knows each answer)
    gpu_server_args: tuple[str, ...] | None = None  # on a GPU host, these instead of server_args (None: the same)

    def args_on(self, gpu: bool) -> tuple[str, ...]:
        """The arm's own server arguments on a host with (or without) a GPU."""
        return self.gpu_server_args if gpu and self.gpu_server_args is not None else self.server_args


def _ngram_config(method: str) -> str:
    # vLLM's prompt lookup as its docs show it: 5 drafts, matched on the last 2-5 tokens (dspark-serve's own ngram
    # drafter looks up the same n-grams)
    return json.dumps({"method": method, "num_speculative_tokens": 5, "prompt_lookup_max": 5, "prompt_lookup_min": 2})


BUILTIN_ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm("baseline", "stock vLLM, JSON asked for in the prompt only (the article's baseline)", mode=Mode.PROMPT),
        Arm("baseline-constrained", "stock vLLM with response_format (the fair baseline)"),
        Arm(
            "dspark",
            # No length: the drafter's longest (the shipped drafter's block, 12), of which the gate verifies what
            # pays by measured acceptance and step costs (benchmarks/dspark/length-sweep/ for fixed lengths)
            "the DSpark engine patch with the article's flags, the draft length measured while serving",
            server_args=("--dspark-enabled", "--response-format", "json", "--enable-prefix-caching"),
            launcher="dspark",
        ),
        Arm(
            "vllm-ngram",
            # the peer: the speculation vLLM already ships, which any team can switch on without DSpark
            "stock vLLM with its own prompt-lookup speculation (k=5): ngram_gpu on a GPU (asynchronous scheduling "
            "kept), ngram on a CPU",
            server_args=("--speculative-config", _ngram_config("ngram")),
            gpu_server_args=("--speculative-config", _ngram_config("ngram_gpu")),
        ),
        Arm(
            "oracle",
            "the speculation ceiling: dspark's settings with a drafter that replays the answers it gave to the "
            "run's prompts in a priming pass, at no model cost (no drafter can do better at dspark's longest, 12)",
            server_args=(
                "--dspark-enabled",
                "--response-format",
                "json",
                "--enable-prefix-caching",
                "--dspark-speculative-length",
                "12",
                "--dspark-drafter",
                "replay",
            ),
            launcher="dspark",
            primed=True,
        ),
    )
}

# Every speed-up (summary column, report, gate) is a ratio to this arm of the same run: stock vLLM asked
# for JSON the same way as the arm under test, so a ratio measures the server, not the request.
REFERENCE_ARM = "baseline-constrained"
# The ceiling: an arm's "speculation efficiency" is its throughput as a share of this arm's, level by level.
ORACLE_ARM = "oracle"
