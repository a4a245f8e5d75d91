"""Per-call wall time of the worker's step parts, for an itemised per-step cost (a probe, not shipped).

    PYTHONPATH=studies/probe/step_timer STEP_TIMER_OUT=/tmp/steps studies/probe/serve.sh PORT LOG [flags...]

Python imports this module at start-up in every process of the server; only vLLM's worker runs the model,
and only vLLM's engine core schedules, so only their files fill: every 500 steps,
``STEP_TIMER_OUT/steps-PID.txt`` (the worker) and ``STEP_TIMER_OUT/core-PID.txt`` (the engine core) get one line of
``part:calls/mean ms``. In the engine core, ``_process_engine_step`` is a whole step with DSpark's hooks; the
others are vLLM's own parts inside it (waits for the worker included), and ``dspark:NAME`` the same call with
DSpark's hook around it. The wrappers go on before DSpark's engine plugin loads, so the patch's own
replacements (``dflash_fixes``) wrap them: ``propose_draft_token_ids`` counts the drafter's real passes only.
"""

import functools
import os
import time

PARTS = ("execute_model", "sample_tokens", "_model_forward", "_prepare_inputs", "_build_attention_metadata",
         "_sample", "propose_draft_token_ids", "_bookkeeping_sync")  # fmt: skip


CORE_PARTS = (
    ("vllm.v1.engine.core:EngineCoreProc", "_process_engine_step"),
    ("vllm.v1.engine.core:EngineCore", "post_step"),
    ("vllm.v1.core.sched.scheduler:Scheduler", "schedule"),
    ("vllm.v1.core.sched.scheduler:Scheduler", "update_from_output"),
    ("vllm.v1.executor.multiproc_executor:MultiprocExecutor", "execute_model"),
    ("vllm.v1.executor.multiproc_executor:MultiprocExecutor", "sample_tokens"),
)


class Timers:
    """Call counts and seconds per part of one process; every 500 calls of ``flush_on`` one line goes to
    ``OUT/PREFIX-PID.txt``."""

    def __init__(self, out: str, prefix: str, flush_on: str) -> None:
        self.path = os.path.join(out, f"{prefix}-{os.getpid()}.txt")
        self.flush_on = flush_on
        self.stats: dict[str, list[float]] = {}

    def wrap(self, owner, name: str, key: str = "") -> None:
        inner, key = getattr(owner, name), key or name

        @functools.wraps(inner)  # the patch binds arguments by the wrapped signature
        def timed(*args, **kwargs):
            started = time.perf_counter()
            result = inner(*args, **kwargs)
            entry = self.stats.setdefault(key, [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - started
            if key == self.flush_on and entry[0] % 500 == 0:
                with open(self.path, "a") as lines:
                    lines.write(" ".join(f"{k}:{int(v[0])}/{v[1] * 1e3 / max(v[0], 1):.3f}ms" for k, v in self.stats.items()) + "\n")
            return result

        setattr(owner, name, timed)


def _install(out: str) -> None:
    import importlib

    from vllm import _custom_ops as ops
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    def owner_of(path: str):
        module, _, owner = path.partition(":")
        return getattr(importlib.import_module(module), owner)

    core = Timers(out, "core", "_process_engine_step")
    for path, name in CORE_PARTS:
        core.wrap(owner_of(path), name)

    # DSpark's own replacements, timed from outside once its plugin has put them on ("dspark:" keys): each minus
    # vLLM's part of the same name is what DSpark's hook costs.
    from dspark_serve import engine_plugin

    register = engine_plugin.register

    def register_then_time():
        register()
        for path, name in CORE_PARTS[1:4]:
            core.wrap(owner_of(path), name, f"dspark:{name}")

    engine_plugin.register = register_then_time

    worker = Timers(out, "steps", "execute_model")
    for name in PARTS:
        if hasattr(GPUModelRunner, name):
            worker.wrap(GPUModelRunner, name)
    worker.wrap(ops, "cpu_attention_with_kv_cache", "attention_kernel")


if _out := os.environ.get("STEP_TIMER_OUT"):
    try:
        _install(_out)
    except Exception as exc:  # a probe never stops a server
        print(f"step_timer: not installed: {exc!r}")
