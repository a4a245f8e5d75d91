"""One wrapper per replaced vLLM method, calling an explicit, ordered list of feature hooks.

A hook is ``hook(proceed, obj, *args, **kwargs)``: ``obj`` is the vLLM object the method was called on, and
``proceed(*args, **kwargs)`` runs the rest of the list, then vLLM's own method. A hook may act before and after
proceeding, change the arguments, or not proceed at all. The first hook of a list is the outermost. Each
vLLM class's module (``targets/``) names its methods and takes their lists; ``engine_plugin.register`` writes
every list in one place, so how the features compose is read there, not inferred from the order of calls.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

Hook = Callable[..., Any]
ORIGINAL = "_dspark_original"  # on a wrapper: the vLLM method it stands in for
HOOKS = "_dspark_hooks"  # on a wrapper: its hooks, outermost first
INHERITED = "_dspark_inherited"  # on a wrapper: vLLM's method is a base class's, not the class's own

# "module:Class.method" -> the names of the hooks its wrapper calls, outermost first (``/dspark/status``, tests)
INSTALLED: dict[str, list[str]] = {}


class HookClock:
    """This process's time in DSpark's hooks: each wrapper's time less that of the vLLM method it stands for,
    by side ("engine": the engine core, scheduler and grammar; "worker": the model runners and drafters) and by
    wrapped method, so a GPU run says what the patch's own Python costs a step and where (``/metrics``:
    ``dspark_engine_hook_us_total``, ``dspark_worker_hook_us_total``, ``dspark_hook_us_total{method=...}``).
    ``sink(counter, microseconds)`` (the engine counters) receives it every ``FLUSH`` calls, by counter name
    (``<side>_hook_us``, ``hook_us:<Class.method>``): a call costs two clock reads and two additions, not a
    shared-memory write."""

    FLUSH = 64

    def __init__(self) -> None:
        self.ns: dict[str, int] = {"engine_hook_us": 0, "worker_hook_us": 0}
        self.calls = 0
        self.sink: Callable[[str, int], None] | None = None

    def add(self, side_counter: str, method_counter: str, ns: int) -> None:
        """``ns`` for both counters (``side_counter``, ``method_counter``): their names are made once per wrapper."""
        self.ns[side_counter] += ns
        self.ns[method_counter] = self.ns.get(method_counter, 0) + ns
        self.calls += 1
        if self.calls >= self.FLUSH:
            self.flush()

    def flush(self) -> None:
        self.calls = 0
        if self.sink is None:
            return
        for counter, ns in self.ns.items():
            if micro := ns // 1000:
                self.sink(counter, micro)
                self.ns[counter] = ns - 1000 * micro


def method_counter(method: str) -> str:
    """The counter that holds the hooks' time on ``method`` ("Class.method"): ``state.COUNTERS`` has one per
    wrapped method, ``/metrics`` labels it by method."""
    return f"hook_us:{method}"


CLOCK = HookClock()
WORKER_MODULES = ("vllm.v1.worker", "vllm.v1.spec_decode", "vllm.model_executor")  # the rest: the engine core's


def timed(original: Callable[..., Any], hooks: Sequence[Hook], side: str, method: str) -> Callable[..., Any]:
    """``compose(original, hooks)``, its time less ``original``'s added to ``CLOCK`` as ``method``'s (a wrapped
    method that ``original`` calls keeps its own)."""
    inside = [0]  # ns spent in vLLM's method, over every call
    side_counter, own_counter = f"{side}_hook_us", method_counter(method)  # not built again on every call

    def vllm_method(obj: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return original(obj, *args, **kwargs)
        finally:
            inside[0] += time.perf_counter_ns() - start

    call = compose(vllm_method, hooks)

    def wrapper(obj: Any, *args: Any, **kwargs: Any) -> Any:
        before, start = inside[0], time.perf_counter_ns()
        try:
            return call(obj, *args, **kwargs)
        finally:
            CLOCK.add(side_counter, own_counter, time.perf_counter_ns() - start - (inside[0] - before))

    return wrapper


def hook_name(hook: Hook) -> str:
    """``Class.method`` of a bound hook, else its qualified name."""
    owner = getattr(hook, "__self__", None)
    return f"{type(owner).__name__}.{hook.__name__}" if owner is not None else getattr(hook, "__qualname__", repr(hook))


def _link(hook: Hook, inner: Callable[..., Any]) -> Callable[..., Any]:
    def linked(obj: Any, *args: Any, **kwargs: Any) -> Any:
        return hook(functools.partial(inner, obj), obj, *args, **kwargs)

    return linked


def compose(original: Callable[..., Any], hooks: Sequence[Hook]) -> Callable[..., Any]:
    """``original`` called through ``hooks``, outermost first: a plain function of (obj, *args, **kwargs)."""
    call = original
    for hook in reversed(hooks):
        call = _link(hook, call)
    return call


def chain(cls: type, name: str, hooks: Sequence[Hook]) -> None:
    """Replace ``cls.name`` by one wrapper that calls ``hooks``, outermost first, then vLLM's method. A second
    call replaces the first's hooks (the wrapper always stands on vLLM's own method); no hooks: vLLM's method
    is put back, so a feature that is off costs nothing per call."""
    own = cls.__dict__.get(name)
    if own is not None and hasattr(own, ORIGINAL):  # chained before: stand on vLLM's method again
        original, inherited = getattr(own, ORIGINAL), getattr(own, INHERITED)
    elif own is not None:
        original, inherited = own, False
    else:  # defined on a base class: the wrapper goes on this class alone
        original, inherited = getattr(cls, name), True
    key = f"{cls.__module__}:{cls.__qualname__}.{name}"
    INSTALLED.pop(key, None)
    if not hooks:
        if own is not None and hasattr(own, ORIGINAL):
            delattr(cls, name) if inherited else setattr(cls, name, original)
        return
    # The composed chain, timed, is the wrapper, with vLLM's signature (inspect follows __wrapped__), name and
    # docstring
    side = "worker" if cls.__module__.startswith(WORKER_MODULES) else "engine"
    wrapper = functools.update_wrapper(timed(original, hooks, side, f"{cls.__qualname__}.{name}"), original)
    setattr(wrapper, ORIGINAL, original)
    setattr(wrapper, INHERITED, inherited)
    setattr(wrapper, HOOKS, tuple(hooks))
    setattr(cls, name, wrapper)
    INSTALLED[key] = [hook_name(hook) for hook in hooks]


def present(*hooks: Hook | None) -> list[Hook]:
    """The hooks of features that are on (a feature that is off gives None), in the order given."""
    return [hook for hook in hooks if hook is not None]
