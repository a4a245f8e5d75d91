"""hooks.chain: one wrapper per method, its hooks called outermost first, on plain classes (no vLLM)."""

import inspect
import time

from dspark_serve import hooks


class Engine:
    def step(self, value: int, scale: int = 1) -> list:
        """vLLM's own."""
        return [("engine", value * scale)]


class Child(Engine):
    pass


def _hook(name, calls):
    def hook(proceed, obj, value, **kwargs):
        calls.append(f"{name} before")
        result = proceed(value + 1, **kwargs)
        calls.append(f"{name} after")
        return [(name, value), *result]

    hook.__qualname__ = name
    return hook


def test_hooks_run_outermost_first_and_may_change_the_arguments():
    original, calls = Engine.step, []
    try:
        hooks.chain(Engine, "step", [_hook("outer", calls), _hook("inner", calls)])
        assert Engine().step(1, scale=10) == [("outer", 1), ("inner", 2), ("engine", 30)]
        assert calls == ["outer before", "inner before", "inner after", "outer after"]
        assert hooks.INSTALLED[f"{__name__}:Engine.step"] == ["outer", "inner"]
        assert inspect.signature(Engine.step) == inspect.signature(original)  # vLLM's, for hooks that bind by name
        assert Engine.step.__doc__ == "vLLM's own."
    finally:
        hooks.chain(Engine, "step", [])
    assert Engine.step is original and f"{__name__}:Engine.step" not in hooks.INSTALLED


def test_a_second_chain_replaces_the_first_and_a_hook_may_not_proceed():
    original = Engine.step
    try:
        hooks.chain(Engine, "step", [_hook("first", [])])
        hooks.chain(Engine, "step", [lambda proceed, obj, value, **kw: ["skipped"]])
        assert Engine().step(1) == ["skipped"]  # the first list is gone, and vLLM's method never ran
        assert getattr(Engine.step, hooks.ORIGINAL) is original
    finally:
        hooks.chain(Engine, "step", [])
    assert Engine.step is original


def test_an_inherited_method_is_wrapped_on_the_subclass_alone():
    try:
        hooks.chain(Child, "step", [_hook("child", [])])
        assert Child().step(1) == [("child", 1), ("engine", 2)]
        assert Engine().step(1) == [("engine", 1)]
    finally:
        hooks.chain(Child, "step", [])
    assert "step" not in Child.__dict__


def test_present_drops_the_hooks_of_features_that_are_off():
    on = _hook("on", [])
    assert hooks.present(None, on, None) == [on]


class Slow:
    def step(self) -> str:
        """vLLM's own, which takes 100 ms."""
        time.sleep(0.1)
        return "stepped"


def test_the_clock_counts_the_hooks_time_and_not_vllms(monkeypatch):
    clock, sunk = hooks.HookClock(), []
    clock.sink = lambda side, micro: sunk.append((side, micro))
    monkeypatch.setattr(hooks, "CLOCK", clock)

    def hook(proceed, obj):
        time.sleep(0.005)  # the hook's own 5 ms
        return proceed()

    try:
        hooks.chain(Slow, "step", [hook])
        assert [Slow().step() for _ in range(3)] == ["stepped"] * 3
        clock.flush()
    finally:
        hooks.chain(Slow, "step", [])
    assert [side for side, _ in sunk] == ["engine"]  # not a worker module's class
    assert 15_000 <= sunk[0][1] < 150_000  # three hooks' 5 ms, none of vLLM's 300 ms
    assert clock.calls == 0 and clock.ns["engine"] < 1000  # flushed, the remainder under a microsecond
