"""Per-call wall time of the worker's step parts, for an itemised per-step cost (a probe, not shipped).

    PYTHONPATH=studies/probe/step_timer STEP_TIMER_OUT=/tmp/steps studies/probe/serve.sh PORT LOG [flags...]

Python imports this module at start-up in every process of the server; only vLLM's worker runs the model,
so only its file fills: every 500 steps, ``STEP_TIMER_OUT/steps-PID.txt`` gets one line of
``part:calls/mean ms``. The wrappers go on before DSpark's engine plugin loads, so the patch's own
replacements (``dflash_fixes``) wrap them: ``propose_draft_token_ids`` counts the drafter's real passes only.
"""

import functools
import os
import time

PARTS = ("execute_model", "sample_tokens", "_model_forward", "_prepare_inputs", "_build_attention_metadata",
         "_sample", "propose_draft_token_ids", "_bookkeeping_sync")  # fmt: skip


def _install(out: str) -> None:
    from vllm import _custom_ops as ops
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    stats: dict[str, list[float]] = {}

    def wrap(owner, name: str, key: str) -> None:
        inner = getattr(owner, name)

        @functools.wraps(inner)  # the patch binds arguments by the wrapped signature
        def timed(*args, **kwargs):
            started = time.perf_counter()
            result = inner(*args, **kwargs)
            entry = stats.setdefault(key, [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - started
            if key == "execute_model" and entry[0] % 500 == 0:
                with open(os.path.join(out, f"steps-{os.getpid()}.txt"), "a") as lines:
                    lines.write(" ".join(f"{k}:{int(v[0])}/{v[1] * 1e3 / max(v[0], 1):.3f}ms" for k, v in stats.items()) + "\n")
            return result

        setattr(owner, name, timed)

    for name in PARTS:
        if hasattr(GPUModelRunner, name):
            wrap(GPUModelRunner, name, name)
    wrap(ops, "cpu_attention_with_kv_cache", "attention_kernel")


if _out := os.environ.get("STEP_TIMER_OUT"):
    try:
        _install(_out)
    except Exception as exc:  # a probe never stops a server
        print(f"step_timer: not installed: {exc!r}")
