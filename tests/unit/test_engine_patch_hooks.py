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
    clock.sink = lambda counter, micro: sunk.append((counter, micro))
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
    # by side (not a worker module's class) and by the method wrapped, each the three hooks' 5 ms, none of
    # vLLM's 300 ms
    assert [counter for counter, _ in sunk] == ["engine_hook_us", "hook_us:Slow.step"]
    assert all(15_000 <= micro < 150_000 for _, micro in sunk) and sunk[0][1] == sunk[1][1]
    assert clock.calls == 0 and clock.ns["engine_hook_us"] < 1000  # flushed, the remainder under a microsecond


def test_every_wrapped_method_has_a_counter_and_a_metric_of_its_own():
    from dspark_serve.engine_plugin import TARGETS
    from dspark_serve.middleware import EngineCountsCollector
    from dspark_serve.state import COUNTERS, HOOKED_METHODS

    wrapped = {key.split(":", 1)[1] for target in TARGETS for key in target.REPLACES}
    assert set(HOOKED_METHODS) == wrapped and {f"hook_us:{method}" for method in wrapped} <= set(COUNTERS)
    by_method = next(family for family in EngineCountsCollector().collect() if family.name == "dspark_hook_us")
    assert {sample.labels["method"] for sample in by_method.samples if sample.name.endswith("_total")} == wrapped
