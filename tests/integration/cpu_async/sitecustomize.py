"""vLLM's asynchronous scheduling on a CPU, for the integration test of DSpark's acceptance cap on that path.

On a GPU, vLLM 0.32 schedules dflash, draft_model and dspark asynchronously: the engine core schedules a
step's draft positions as placeholders before the previous step's drafts exist, and the worker fills them.
vLLM's CPU platform turns asynchronous scheduling off, so nothing on a CPU machine runs that path. With
this directory on a server's PYTHONPATH (Python imports ``sitecustomize`` in every process it starts: the
API server, the engine core, the worker), the CPU platform leaves it on, and the worker's CUDA stream and
event calls, which only order copies on a GPU, do nothing, as vLLM's CPU model runner already makes them
do while it starts (``_torch_cuda_wrapper``). On a CPU every copy is done when it returns.

Not shipped: a probe on a 2-core AVX-512 EPYC (order_extraction, json_object) found it answering as the
synchronous path does and slower, 1,440-1,475 against 1,806-1,829 tok/s at 8 users and 911-932 against 994-1,009 at 1, since the
CPU's worker is the busy process either way (benchmarks/dspark/RESULTS.md, session 19).
"""

import contextlib

import torch


class _Event:
    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def record(self, *args: object, **kwargs: object) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait(self, *args: object, **kwargs: object) -> None:
        pass

    def query(self) -> bool:
        return True


class _Stream(_Event):
    def wait_stream(self, *args: object, **kwargs: object) -> None:
        pass

    def wait_event(self, *args: object, **kwargs: object) -> None:
        pass


torch.cuda.Event = _Event  # type: ignore[assignment, misc]
torch.cuda.Stream = _Stream  # type: ignore[assignment, misc]
torch.cuda.current_stream = lambda *args, **kwargs: _Stream()  # type: ignore[assignment]
torch.cuda.stream = lambda stream: contextlib.nullcontext()  # type: ignore[assignment]

from vllm.platforms import cpu  # noqa: E402

_check_and_update_config = cpu.CpuPlatform.check_and_update_config.__func__  # type: ignore[attr-defined]


def _asynchronous(cls: type, vllm_config: object) -> None:
    _check_and_update_config(cls, vllm_config)
    vllm_config.scheduler_config.async_scheduling = True  # type: ignore[attr-defined]


cpu.CpuPlatform.check_and_update_config = classmethod(_asynchronous)  # type: ignore[method-assign, assignment]
