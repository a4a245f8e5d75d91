"""One wrapper per replaced vLLM method, calling an explicit, ordered list of feature hooks.

A hook is ``hook(proceed, obj, *args, **kwargs)``: ``obj`` is the vLLM object the method was called on, and
``proceed(*args, **kwargs)`` runs the rest of the list, then vLLM's own method. A hook may act before and after
proceeding, change the arguments, or not proceed at all. The first hook of a list is the outermost. Each
vLLM class's module (``targets/``) names its methods and takes their lists; ``engine_plugin.register`` writes
every list in one place, so how the features compose is read there, not inferred from the order of calls.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

Hook = Callable[..., Any]
ORIGINAL = "_dspark_original"  # on a wrapper: the vLLM method it stands in for
HOOKS = "_dspark_hooks"  # on a wrapper: its hooks, outermost first
INHERITED = "_dspark_inherited"  # on a wrapper: vLLM's method is a base class's, not the class's own

# "module:Class.method" -> the names of the hooks its wrapper calls, outermost first (``/dspark/status``, tests)
INSTALLED: dict[str, list[str]] = {}


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
    # The composed chain itself is the wrapper (no extra call per step), with vLLM's signature (inspect follows
    # __wrapped__), name and docstring
    wrapper = functools.update_wrapper(compose(original, hooks), original)
    setattr(wrapper, ORIGINAL, original)
    setattr(wrapper, INHERITED, inherited)
    setattr(wrapper, HOOKS, tuple(hooks))
    setattr(cls, name, wrapper)
    INSTALLED[key] = [hook_name(hook) for hook in hooks]


def present(*hooks: Hook | None) -> list[Hook]:
    """The hooks of features that are on (a feature that is off gives None), in the order given."""
    return [hook for hook in hooks if hook is not None]
