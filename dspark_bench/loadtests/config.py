"""What a run is: a YAML file, with command-line flags overriding it, checked before anything starts."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, NoReturn

from dspark_bench.files import FileProblem, read_yaml_mapping
from dspark_bench.loadtests.arms import BUILTIN_ARMS, Arm
from dspark_bench.loadtests.deploy.gpustack_spec import GPUStackSpecError, parse_settings
from dspark_bench.loadtests.machine import DTYPES
from dspark_bench.loadtests.metrics import MIN_WAVES, SLO_KEYS
from dspark_bench.loadtests.model_shapes import SHAPES, is_known
from dspark_bench.loadtests.openai_api import CONFIG_FIELDS, MAX_TOKENS, REQUEST_TIMEOUT_S, TEMPERATURE, RequestSettings
from dspark_bench.scenarios import Mode, Scenario, ScenarioError, TraceScenario, builtin_names, load_scenario
from dspark_bench.scenarios.trace import load_trace

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = REPO_ROOT / "models" / "tiny-json"
DEFAULT_LEVELS = (1, 2, 4, 8, 16, 32, 64)


class ConfigError(ValueError):
    """A run configuration that cannot work; the message names the setting and the fix."""


SETTING = "setting"  # the dataclass field metadata key that holds a RunConfig field's Setting


@dataclass(frozen=True)
class Setting:
    """How one run setting is written and checked, beside its type and default on ``RunConfig``. The YAML key
    is the field's name; the YAML type check, the ``bench`` and ``ui`` flags and their help all derive from it."""

    help: str
    example: str  # as written in YAML, a list's items without brackets; also the fix in error messages
    kind: type | tuple[type, ...]  # what a YAML value must be; for a list setting, what each item must be
    is_list: bool = False
    flag: str | None = ""  # "": --<name-with-dashes>; None: YAML only
    aliases: tuple[str, ...] = ()  # more flags for it (a one-value spelling, e.g. --rate for --rates)
    ui: bool = True  # ``ui`` honours it, and offers its flag too; False: it has no meaning under the web UI
    choices: tuple[str, ...] | None = None
    parse: Callable[[str], Any] | None = None  # a flag's text -> the value; default: by ``kind``, lists comma-separated
    repeatable: bool = False  # the flag may be given many times; ``parse`` (then required) gives a mapping's (key, value) pairs
    metavar: str | None = None  # the flag's value in --help
    flag_example: str | None = None  # the example as the flag's text, where it is not ``example`` without spaces

    def flag_name(self, name: str) -> str | None:
        return None if self.flag is None else (self.flag or "--" + name.replace("_", "-"))


def setting(default: Any = MISSING, *, factory: Any = MISSING, **spec: Any) -> Any:
    """A RunConfig field with its Setting."""
    return field(default=default, default_factory=factory, metadata={SETTING: Setting(**spec)})


def _key_values(text: str, key: Callable[[str], Any], value: Callable[[str], Any]) -> dict[Any, Any]:
    """A mapping flag's text, ``K=V,K=V``, each side converted; ValueError names a pair without '='."""
    pairs = {}
    for pair in text.split(","):
        k, sep, v = pair.strip().partition("=")
        if not sep:
            raise ValueError(pair)
        pairs[key(k)] = value(v)
    return pairs


def _slo_pairs(text: str) -> dict[str, float]:
    return _key_values(text, str, float)


def _level_counts(text: str) -> dict[int, int]:
    return _key_values(text, int, int)


def _url_pair(text: str) -> tuple[str, str]:
    arm, sep, url = text.partition("=")
    if not sep or not url.startswith(("http://", "https://")):
        raise ValueError(text)
    return arm, url


@dataclass(frozen=True)
class RunConfig:
    """Every run setting, declared once: its type, default and ``Setting`` (help, example, check, flags)."""

    model: str = setting(str(DEFAULT_MODEL), kind=str, example="models/tiny-json",
                         metavar="DIR",
                         help="local model directory for local arms (default: the embedded models/tiny-json)")
    model_shape: str | None = setting(None, kind=str, example="llama-8b", ui=False, metavar="SHAPE",
                                      help="serve a model of this shape instead, with --model's tokenizer and vLLM's dummy "
                                      f"weights (--load-format dummy): {', '.join(SHAPES)}, or a config.json of your own. "
                                      "A cost-only run: answers are noise, so ratios are over raw output tokens and "
                                      "validity is not reported (loadtests/model_shapes.py)")
    scenarios: tuple[str, ...] = setting(("order_extraction",), kind=str, is_list=True, flag="--scenario",
                                         example="order_extraction, tool_call",
                                         help="comma-separated scenario names or YAML paths (ui: one)")
    mode: Mode = setting(Mode.JSON_OBJECT, kind=str, example="json_object",
                         choices=(Mode.PROMPT.value, Mode.JSON_OBJECT.value, Mode.JSON_SCHEMA.value),
                         help="how JSON is asked for, by arms that do not force a way (the article's DSpark arm: json_object)")
    arms: tuple[str, ...] = setting(("baseline", "baseline-constrained", "dspark"), kind=str, is_list=True,
                                    example="baseline, dspark", ui=False,
                                    help="comma-separated arms (baseline, baseline-constrained, dspark, or custom)")
    levels: tuple[int, ...] = setting(DEFAULT_LEVELS, kind=int, is_list=True, example="1, 8, 64", ui=False,
                                      help="closed loop: comma-separated users per level, e.g. 1,2,4,8,16,32,64")
    rates: tuple[float, ...] = setting((), kind=(int, float), is_list=True, example="1, 2, 4, 8", aliases=("--rate",),
                                       help="open loop instead of levels: requests per second per level, e.g. 1,2,4,8 (ui: one)")
    arrival: str = setting("poisson", kind=str, example="poisson", choices=("poisson", "constant"),
                           help="open loop: arrival process, poisson or constant gaps")
    trace: str | None = setting(None, kind=str, example="examples/trace-mooncake.jsonl", ui=False, metavar="FILE",
                                help="replay a trace instead of levels or rates: each arm gets the file's requests at the file's "
                                "own arrival times, one open-loop level (Mooncake JSONL and Azure LLM CSV traces read as "
                                "published, or dataset lines with a timestamp in ms: dspark_bench/scenarios/trace.py)")
    trace_speed: float = setting(1.0, kind=(int, float), example="2", ui=False,
                                 help="trace replay: the trace's clock runs this many times faster (2: twice the rate)")
    find_capacity: bool = setting(False, kind=bool, example="true", ui=False,
                                  help="search each arm's capacity: the highest open-loop rate at which the share of "
                                  "good requests (valid and within --slo) holds capacity_share, by bracketing then "
                                  "bisection from the first --rate (default 1/s); each probe a level of --requests")
    capacity_share: float = setting(0.9, kind=(int, float), example="0.9", ui=False,
                                    help="capacity search: the share of good requests a rate must hold")
    capacity_resolution: float = setting(0.1, kind=(int, float), example="0.1", ui=False,
                                         help="capacity search: done when the lowest failing rate is within this share "
                                         "above the highest passing one")
    server_cpus: str | None = setting(None, kind=(int, str), example="0-3", ui=False, metavar="CPUS",
                                      help="CPUs the local arms' servers run on, a Linux CPU list (0-3,8); vLLM binds its "
                                      "OpenMP threads there. With --client-cpus: the load generator and the servers kept "
                                      "apart, so neither starves the other on a small machine (default: both anywhere)")
    client_cpus: str | None = setting(None, kind=(int, str), example="4-5", ui=False, metavar="CPUS",
                                      help="CPUs the load generator (this process and its Locust workers) runs on")
    max_concurrency: int = setting(256, kind=int, example="256", ui=False,
                                   help="open loop: users sending the due requests, the cap on requests in flight")
    workers: int = setting(0, kind=int, example="2",
                           help="Locust worker processes that send the requests, this process their master (0: the users "
                           "run here); for when one process cannot keep up (a level flagged for low concurrency or rate)")
    requests_per_level: int = setting(200, kind=int, example="200", flag="--requests", ui=False,
                                      help="measured requests per level, at least (article: 200); a closed loop runs "
                                      f"whole waves of its users with the warm-up, {MIN_WAVES} at least without it")
    level_requests: dict[int, int] = setting(factory=dict, kind=dict, example="{1: 24, 8: 62}", parse=_level_counts,
                                             flag_example="1=24,8=62", metavar="LEVEL=N,..", ui=False,
                                             help="measured requests at some levels, at least (beside requests_per_level): more "
                                             "where a level's spread is wide, e.g. few users, who each send few requests")
    warmup_requests: int = setting(2, kind=int, example="2", flag="--warmup", ui=False,
                                   help="warm-up requests per level, not measured")
    repeats: int = setting(1, kind=int, example="3", ui=False, help="run each level this many times per arm")
    level_repeats: dict[int, int] = setting(factory=dict, kind=dict, example="{1: 5, 8: 5}", parse=_level_counts,
                                            flag_example="1=5,8=5", metavar="LEVEL=N,..", ui=False,
                                            help="repeats at some levels instead of repeats: more where a level is short and "
                                            "its ratio spreads (few users), so its interval narrows at little cost")
    budget_minutes: float | None = setting(None, kind=(int, float), example="10", ui=False, metavar="MINUTES",
                                           help="after every level's own repeats, more rounds while a level's next round fits "
                                           "in this many minutes from the first level's start (judged by its slowest round "
                                           "so far): a fast machine narrows its intervals, a slow one stops at its own repeats")
    remeasure: int = setting(0, kind=int, example="2", ui=False, metavar="ROUNDS",
                             help="rounds a level may run once more, for every arm, when the machine disturbed it (some "
                             "arm's level was not a measurement: a pause, a starved load generator, other work on the "
                             "CPU), so its ratios keep the rounds asked for (make gate: 2); 0: never. Not with primed arms")
    max_tokens: int = setting(MAX_TOKENS, kind=int, example="512", help="max_tokens of every request")
    temperature: float = setting(TEMPERATURE, kind=(int, float), example="0.0",
                                 help="temperature of every request (0: greedy, as the article)")
    top_p: float | None = setting(None, kind=(int, float), example="0.95", metavar="P",
                                  help="top_p of every request (unset: the server's default)")
    request_timeout_s: float = setting(REQUEST_TIMEOUT_S, kind=(int, float), example="120", flag="--request-timeout",
                                       help="seconds per request, for the whole answer")
    startup_timeout_s: float = setting(600.0, kind=(int, float), example="600", flag="--startup-timeout",
                                       help="seconds for a server to be ready")
    level_timeout_s: float = setting(3600.0, kind=(int, float), example="3600", flag="--level-timeout", ui=False,
                                     help="seconds per level and arm")
    output_dir: str = setting("runs", kind=str, example="runs", flag="--out", help="parent folder of run folders")
    run_name: str | None = setting(None, kind=str, example="my-run", flag="--name",
                                   help="run folder name (default: a timestamp)")
    urls: dict[str, str] = setting(factory=dict, kind=dict, example="{baseline: http://127.0.0.1:8000}", flag="--url",
                                   flag_example="baseline=http://127.0.0.1:8000",
                                   parse=_url_pair, repeatable=True, metavar="ARM=URL",
                                   help="ARM=URL: use a running server for ARM (repeatable)")
    api_key_env: str = setting("OPENAI_API_KEY", kind=str, example="OPENAI_API_KEY",
                               help="environment variable holding the API key for --url servers")
    served_model_name: str | None = setting(None, kind=str, example="tiny-json", flag=None,
                                            help="the model name local arms serve, and --url servers are asked for (default: the model folder's name)")
    dtype: str = setting("auto", kind=str, example="float32", choices=DTYPES,
                         help="the weights' and KV cache's dtype on every local arm alike. auto: bfloat16 (the model's "
                         "own) on a GPU or a CPU that computes bf16 natively (AVX-512 BF16, AMX); float32 on other CPUs, "
                         "where bf16 serves 4x slower at 16-64 users (machine.serving_dtype)")
    server_args: tuple[str, ...] = setting(("--max-model-len", "1024", "--enable-prompt-tokens-details"), kind=str, is_list=True,
                                           example="--max-model-len, 1024", flag=None,
                                           help="vLLM arguments given to every local arm")
    custom_arms: tuple[Arm, ...] = setting((), kind=dict, is_list=True, flag=None,
                                           example="{name: ngram, server_args: [...], mode: json_schema}",
                                           help="arms of your own: name, description, server_args, gpu_server_args (on a GPU host instead), launcher, mode, primed")
    slo: dict[str, float] = setting(factory=dict, kind=dict, example="{ttft_ms: 500, e2e_ms: 2000}", parse=_slo_pairs,
                                    flag_example="ttft_ms=500,e2e_ms=2000",
                                    metavar="ttft_ms=..,tpot_ms=..,e2e_ms=..",
                                    help="service-level objectives, NAME=MILLISECONDS pairs of ttft_ms, tpot_ms, e2e_ms: "
                                    "goodput counts valid answers within all given")
    gpustack: dict[str, Any] | None = setting(None, kind=dict, example="{url: http://host, model_path: /models/m}",
                                              flag=None, help="deploy the arms on a GPUStack cluster (deploy/gpustack_spec.py)")

    @property
    def cost_only(self) -> bool:
        """The model's weights are vLLM's dummy ones: a step costs what the shape's does, answers are noise."""
        return self.model_shape is not None

    def arm(self, name: str) -> Arm:
        for arm in self.custom_arms:
            if arm.name == name:
                return arm
        return BUILTIN_ARMS[name]

    def arm_mode(self, arm: Arm) -> Mode:
        return arm.mode or self.mode

    def request_settings(self, arm: str, model: str, headers: dict[str, str], is_json: bool = True) -> RequestSettings:
        """How every request to ``arm`` is sent: the one place run settings become request settings (the
        sweep's levels, its smoke request and priming, and ``ui``'s Locust command)."""
        mode = self.arm_mode(self.arm(arm)) if is_json else Mode.TEXT
        return RequestSettings(model, mode, headers=headers, **{name: getattr(self, name) for name in CONFIG_FIELDS})

    def scenario(self, name: str) -> Scenario:
        """A scenario of this run: the trace counts its token lengths in the run's model's tokenizer."""
        if self.trace is not None and name == self.trace:
            return load_trace(Path(name), load_scenario, model_dir=self.model)
        return load_scenario(name)

    def repeats_at(self, level: float) -> int:
        """How many times each arm runs one level: ``level_repeats`` where it names the level, else ``repeats``."""
        return self.repeats if self.rates else self.level_repeats.get(int(level), self.repeats)

    @property
    def remeasure_rounds(self) -> int:
        """Rounds a disturbed level may add (``remeasure``); none with a primed arm, which is primed with every
        prompt of the run before it starts, so a round not known then would find its prompts cold."""
        return 0 if any(self.arm(name).primed for name in self.arms) else self.remeasure

    @property
    def most_repeats(self) -> int:
        """The repeats of the level that runs most often: the sweep's outer loop runs this many rounds."""
        return max((self.repeats_at(level) for level in self.rates or self.levels), default=self.repeats)

    def measured_requests(self, level: float) -> int:
        """Measured requests of one level: ``requests_per_level``, or more where ``level_requests`` asks; a
        closed loop of N users measures at least MIN_WAVES waves of N (no level is a single burst, whose
        concurrency holds by construction) and sends whole waves, its warm-up requests included in the first."""
        if self.rates:
            return self.requests_per_level
        users = int(level)
        wanted = max(self.requests_per_level, self.level_requests.get(users, 0), MIN_WAVES * users)
        return -(-(wanted + self.warmup_requests) // users) * users - self.warmup_requests

    def level_prompts(self, level: float) -> int:
        """Prompts of one level's block: its warm-up and measured requests', and, for a closed loop of two
        users or more, as many again as it measures for its tail requests (``plan.LevelPlan``; one user sends
        none), so that a tail never finds its prompt in a prefix cache (an arm that caches prefixes would
        otherwise serve its tails cheaper than one that does not, and its last measured answers beside them
        faster)."""
        sent = self.warmup_requests + self.measured_requests(level)
        return sent if self.rates or level < 2 else sent + self.measured_requests(level)


def settings() -> dict[str, Setting]:
    """Every run setting by name, in declaration order."""
    return {f.name: f.metadata[SETTING] for f in fields(RunConfig)}


def _fail(setting: str, problem: str, fix: str) -> NoReturn:
    raise ConfigError(f"setting '{setting}': {problem}; fix: {fix}")


def _parse_arm(raw: Any) -> Arm:
    if not isinstance(raw, dict) or "name" not in raw:
        _fail("custom_arms", f"{raw!r} is not a mapping with a name", "write '- {name: x, server_args: [...], mode: prompt}'")
    unknown = set(raw) - {"name", "description", "server_args", "gpu_server_args", "launcher", "mode", "primed"}
    if unknown:
        _fail(
            f"custom_arms.{raw['name']}",
            f"unknown keys {sorted(unknown)}",
            "use name, description, server_args, gpu_server_args, launcher, mode, primed",
        )
    if not isinstance(raw.get("primed", False), bool):
        _fail(f"custom_arms.{raw['name']}.primed", f"{raw['primed']!r} is not true or false", "write primed: true")
    mode = raw.get("mode")
    if mode is not None and mode not in {m.value for m in Mode}:
        _fail(f"custom_arms.{raw['name']}.mode", f"unknown mode {mode!r}", "use prompt, json_object or json_schema")
    return Arm(
        name=str(raw["name"]),
        description=str(raw.get("description", "custom arm")),
        server_args=tuple(str(a) for a in raw.get("server_args", ())),
        gpu_server_args=None if raw.get("gpu_server_args") is None else tuple(str(a) for a in raw["gpu_server_args"]),
        launcher=str(raw.get("launcher", "vllm")),
        mode=Mode(mode) if mode else None,
        primed=raw.get("primed", False),
    )


def load_config(path: str | Path | None = None, **overrides: Any) -> RunConfig:
    """Defaults, then the YAML file, then ``overrides`` (CLI flags; None means 'not given')."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            values.update(read_yaml_mapping(path, "see dspark_bench/loadtests/configs/"))
        except FileProblem as exc:
            raise ConfigError(f"config file {exc}") from None
    values.update({k: v for k, v in overrides.items() if v is not None})
    schema = settings()
    for key in values:
        if key not in schema:
            _fail(key, "unknown setting", f"use one of {', '.join(sorted(schema))}")
    for key, spec in schema.items():
        if key not in values:
            continue
        if spec.is_list:
            if isinstance(values[key], str):
                values[key] = [v.strip() for v in values[key].split(",") if v.strip()]
            elif isinstance(values[key], int | float) and not isinstance(values[key], bool) and spec.kind is not str:
                values[key] = [values[key]]  # "levels: 8" means one level
            if not isinstance(values[key], list | tuple):
                _fail(key, f"{values[key]!r} is not a list", f"write a list, e.g. {key}: [{spec.example}]")
            values[key] = tuple(values[key])
            continue
        kinds = spec.kind if isinstance(spec.kind, tuple) else (spec.kind,)
        if values[key] is not None and (not isinstance(values[key], kinds) or (isinstance(values[key], bool) and bool not in kinds)):
            wanted = " or ".join(k.__name__ for k in kinds)
            _fail(key, f"{values[key]!r} is a {type(values[key]).__name__}, not a {wanted}", f"write e.g. {key}: {spec.example}")
    if "custom_arms" in values:
        if not isinstance(values["custom_arms"], list | tuple):
            _fail("custom_arms", "not a list", "write a list of arms: '- {name: x, server_args: [...]}'")
        values["custom_arms"] = tuple(_parse_arm(a) for a in values["custom_arms"])
    if "mode" in values:
        if str(values["mode"]) not in {Mode.PROMPT, Mode.JSON_OBJECT, Mode.JSON_SCHEMA}:
            _fail("mode", f"unknown mode {values['mode']!r}", "use prompt, json_object or json_schema")
        values["mode"] = Mode(values["mode"])
    _drop_levels_not_run(values, overrides)
    config = replace(RunConfig(), **values)
    return validate_config(config)


def _drop_levels_not_run(values: dict[str, Any], overrides: dict[str, Any]) -> None:
    """A file's per-level settings name the file's levels. Where flags choose the levels (or rates) and not
    those settings, entries for levels this run no longer has are dropped, not refused: ``--levels 16,32`` on a
    config that gives 1 and 8 users more repeats. Entries written beside the levels they name stay checked."""
    if overrides.get("levels") is None and overrides.get("rates") is None:
        return
    run = set() if overrides.get("rates") is not None else {str(level).strip() for level in values.get("levels", ())}
    for name in ("level_requests", "level_repeats"):
        if overrides.get(name) is None and isinstance(values.get(name), dict):
            values[name] = {key: count for key, count in values[name].items() if str(key) in run}


def validate_config(config: RunConfig) -> RunConfig:
    """The config, with levels as integers, or ConfigError naming the first setting that cannot work."""
    for key in ("scenarios", "arms", "server_args"):
        for item in getattr(config, key):
            if not isinstance(item, str):
                _fail(key, f"{item!r} is not a string", f"write e.g. {key}: [{settings()[key].example}]")
    known_arms = set(BUILTIN_ARMS) | {a.name for a in config.custom_arms}
    for name in config.arms:
        if name not in known_arms:
            _fail("arms", f"unknown arm {name!r}", f"use {', '.join(sorted(known_arms))} or define it under custom_arms")
    if not config.arms:
        _fail("arms", "no arms", "name at least one arm")
    for name in config.scenarios:
        try:
            load_scenario(name)
        except ScenarioError as exc:
            raise ConfigError(f"setting 'scenarios': {exc}") from None
    if not config.scenarios:
        _fail("scenarios", "empty", f"use some of {', '.join(builtin_names())}")
    try:
        if any(isinstance(level, bool | float) for level in config.levels):
            raise ValueError
        levels = tuple(int(level) for level in config.levels)
    except (TypeError, ValueError):
        _fail("levels", f"{list(config.levels)!r} are not whole numbers", "write e.g. 1,2,4,8")
    if not levels or min(levels) < 1:
        _fail("levels", "concurrency levels must be >= 1", "write e.g. 1,2,4,8")
    rates = tuple(config.rates)
    if any(isinstance(r, bool) or not isinstance(r, int | float) or r <= 0 for r in rates):
        _fail("rates", f"{list(rates)!r} are not positive requests per second", "write e.g. rates: [0.5, 1, 2, 4]")
    if config.dtype not in DTYPES:
        _fail("dtype", f"unknown dtype {config.dtype!r}", f"use one of {', '.join(DTYPES)}")
    if config.arrival not in ("poisson", "constant"):
        _fail("arrival", f"unknown arrival process {config.arrival!r}", "use poisson (default) or constant")
    if not isinstance(config.workers, int) or isinstance(config.workers, bool) or not 0 <= config.workers <= 64:
        _fail("workers", f"{config.workers!r} is not a number of processes from 0 to 64", "write e.g. workers: 2 (0: no workers)")
    if not isinstance(config.max_concurrency, int) or config.max_concurrency < 1:
        _fail("max_concurrency", f"{config.max_concurrency!r} is not an integer >= 1", "write e.g. max_concurrency: 256")
    for name, value, low in (
        ("requests_per_level", config.requests_per_level, 1),
        ("warmup_requests", config.warmup_requests, 0),
        ("repeats", config.repeats, 1),
        ("remeasure", config.remeasure, 0),
        ("max_tokens", config.max_tokens, 1),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            _fail(name, f"{value!r} is not an integer >= {low}", f"give an integer >= {low}")
    if config.budget_minutes is not None:
        if isinstance(config.budget_minutes, bool) or config.budget_minutes <= 0:
            _fail("budget_minutes", f"{config.budget_minutes!r} is not a positive number of minutes", "write e.g. budget_minutes: 10")
        if config.rates or config.trace is not None or config.find_capacity:
            _fail("budget_minutes", "extra rounds are for closed-loop levels", "drop budget_minutes, or use levels")
        if primed := [arm for arm in config.arms if config.arm(arm).primed]:
            _fail("budget_minutes", f"arm '{primed[0]}' is primed with every prompt of the run before it starts, "
                  "and extra rounds are not known then", "drop budget_minutes, or set repeats")  # fmt: skip
    for name, seconds in (
        ("request_timeout_s", config.request_timeout_s),
        ("startup_timeout_s", config.startup_timeout_s),
        ("level_timeout_s", config.level_timeout_s),
    ):
        if seconds <= 0:
            _fail(name, f"{seconds!r} seconds is not a positive time", f"write e.g. {name}: {settings()[name].example}")
    for name in ("level_requests", "level_repeats"):
        for level, count in getattr(config, name).items():
            if rates or level not in levels:
                _fail(f"{name}.{level}", "not a closed-loop level of this run", f"use one of the levels {', '.join(map(str, levels))}")
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                _fail(f"{name}.{level}", f"{count!r} is not an integer >= 1", f"write e.g. {name}: {settings()[name].example}")
    for key, limit in config.slo.items():
        if key not in SLO_KEYS:
            _fail(f"slo.{key}", "unknown objective", f"use {', '.join(SLO_KEYS)}")
        if not isinstance(limit, int | float) or isinstance(limit, bool) or limit <= 0:
            _fail(f"slo.{key}", f"{limit!r} is not a positive number of milliseconds", f"write e.g. slo: {settings()['slo'].example}")
    if config.temperature < 0:
        _fail("temperature", f"{config.temperature!r} is negative", "write a temperature >= 0 (0: greedy, as the article)")
    for arm, url in config.urls.items():
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            _fail(f"urls.{arm}", f"{url!r} is not an http(s) URL", "write urls: {ARM: http://host:port}")
    if config.gpustack is not None:
        if config.urls:
            _fail("gpustack", "given together with urls", "deploy on GPUStack or point at running servers, not both")
        try:
            parse_settings(config.gpustack)
        except GPUStackSpecError as exc:
            raise ConfigError(str(exc)) from None
    elif config.urls:
        missing = [a for a in config.arms if a not in config.urls]
        if missing:
            _fail("urls", f"no URL for arms {missing}", "give --url ARM=http://host:port for every arm, or drop those arms")
    if config.model_shape is not None:
        if config.urls or config.gpustack is not None:
            _fail("model_shape", "given for servers this run does not start", "drop --model-shape: only local arms are shaped")
        if not is_known(config.model_shape):
            _fail("model_shape", f"unknown shape {config.model_shape!r}", f"use one of {', '.join(SHAPES)} or a config.json path")
    if not (config.urls or config.gpustack is not None or Path(config.model).is_dir()):
        _fail("model", f"{config.model} is not a model directory", "give a local HF model folder (default: models/tiny-json)")
    as_text = {name: None if (text := getattr(config, name)) is None else str(text) for name in ("server_cpus", "client_cpus")}
    # a YAML "server_cpus: 0" is a number: one CPU list like any other
    config = replace(config, server_cpus=as_text["server_cpus"], client_cpus=as_text["client_cpus"])
    server_cpus, client_cpus = (_cpu_set(name, text) for name, text in as_text.items())
    if server_cpus and (config.urls or config.gpustack is not None):
        _fail("server_cpus", "given for servers this run does not start", "drop --server-cpus: only local arms are placed")
    if server_cpus and client_cpus and server_cpus & client_cpus:
        _fail("client_cpus", f"shares CPUs {sorted(server_cpus & client_cpus)} with server_cpus", "give the two disjoint CPU lists")
    if config.find_capacity:
        if config.trace is not None:
            _fail("find_capacity", "given together with a trace", "search capacity at --rate, or replay the trace, not both")
        if not 0 < config.capacity_share <= 1:
            _fail("capacity_share", f"{config.capacity_share!r} is not a share in (0, 1]", "write e.g. capacity_share: 0.9")
        if not 0 < config.capacity_resolution < 1:
            _fail("capacity_resolution", f"{config.capacity_resolution!r} is not a share in (0, 1)", "write e.g. capacity_resolution: 0.1")
        if len(rates) > 1:
            _fail("rates", "more than one with --find-capacity", "give the rate the search starts from: --rate 2")
    config = replace(config, levels=levels, rates=tuple(float(r) for r in rates))
    return _with_trace(config) if config.trace is not None else config


def parse_cpu_list(text: str) -> frozenset[int]:
    """A Linux CPU list ("0", "0-3,8") as a set of CPU numbers; ValueError if it is not one."""
    cpus: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()) or int(high or low) < int(low):
            raise ValueError(part)
        cpus.update(range(int(low), int(high or low) + 1))
    return frozenset(cpus)


def _cpu_set(name: str, text: str | None) -> frozenset[int]:
    """The CPUs of a placement setting, each one this process may run on; empty when not given."""
    if text is None:
        return frozenset()
    available = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    try:
        cpus = parse_cpu_list(text)
    except ValueError:
        _fail(name, f"{text!r} is not a CPU list", "write e.g. 0 or 0-3,8 (Linux CPU numbers)")
    if not available:
        _fail(name, "CPU placement needs Linux (sched_setaffinity)", f"drop --{name.replace('_', '-')}")
    if missing := sorted(cpus - set(available)):
        _fail(name, f"CPUs {missing} are not available here (this machine: {','.join(map(str, available))})", "give CPUs of this machine")
    return cpus


def placement_line(config: RunConfig) -> str | None:
    """Where the run placed its processes, in words; None when it placed none (every process anywhere)."""
    if not config.server_cpus and not config.client_cpus:
        return None
    servers = f"local servers on CPUs {config.server_cpus}" if config.server_cpus else "servers on any CPU"
    client = f"the load generator on CPUs {config.client_cpus}" if config.client_cpus else "the load generator on any CPU"
    return f"placement: {servers}, {client}"


def _with_trace(config: RunConfig) -> RunConfig:
    """A trace replay is one open-loop level: the trace's requests, in its order, at its mean rate (scaled by
    ``trace_speed``); ``--trace`` names the scenario, and the sweep sends at the trace's own times."""
    if isinstance(config.trace_speed, bool) or not isinstance(config.trace_speed, int | float) or config.trace_speed <= 0:
        _fail("trace_speed", f"{config.trace_speed!r} is not a positive factor", "write e.g. --trace-speed 2 (twice as fast)")
    if config.workers:
        _fail("trace", "replayed with Locust workers", "drop --workers: a trace replays from this process")
    try:
        scenario = load_scenario(str(config.trace))
    except ScenarioError as exc:
        raise ConfigError(f"setting 'trace': {exc}") from None
    if not isinstance(scenario, TraceScenario):
        _fail("trace", f"{config.trace} has no arrival times", "give each line a timestamp (ms), or run it as --scenario")
    rate = round(scenario.rate * config.trace_speed, 6)
    if config.rates not in ((), (rate,)):
        _fail("rates", "given together with a trace", "drop --rate: a trace sends at its own times")
    return replace(config, scenarios=(str(config.trace),), rates=(rate,), requests_per_level=len(scenario.offsets_s), warmup_requests=0)


def add_setting_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """The flags of every setting that has one (``ui``: those it honours), as text that ``flag_overrides``
    turns into values; the default is None, 'not given', so a config file's value stands."""
    for name, spec in settings().items():
        flag = spec.flag_name(name)
        if flag is None or (command == "ui" and not spec.ui):
            continue
        default = RunConfig.__dataclass_fields__[name].default
        if spec.kind is bool:  # a switch: given means on
            parser.add_argument(flag, dest=name, action="store_const", const=True, help=f"{spec.help}; YAML: {name}")
            continue
        shown = "" if default in (MISSING, None, ()) or "default" in spec.help else f" (default {_shown(default)})"
        parser.add_argument(
            flag, *spec.aliases, dest=name, action="append" if spec.repeatable else "store",
            metavar=spec.metavar or ("|".join(spec.choices) if spec.choices else None),
            help=f"{spec.help}{shown}; YAML: {name}",
        )  # fmt: skip


def _shown(default: Any) -> str:
    if isinstance(default, tuple):
        return ",".join(str(v) for v in default)
    return str(getattr(default, "value", default))


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags in ``args``, as values (None: not given); ConfigError naming the flag for
    text that is not what the setting takes."""
    overrides: dict[str, Any] = {}
    for name, spec in settings().items():
        text = getattr(args, name, None)
        flag = spec.flag_name(name)
        if text is None or flag is None:
            continue
        try:
            overrides[name] = _parse_flag(spec, text)
        except ValueError:
            given = " ".join(text) if isinstance(text, list) else text
            raise ConfigError(f"{flag} {given!r}: write e.g. {flag} {_flag_example(spec)}") from None
    return overrides


def _parse_flag(spec: Setting, text: Any) -> Any:
    if isinstance(text, bool):  # a switch
        return text
    if spec.parse is not None and spec.repeatable:
        return dict(spec.parse(item) for item in text)
    if spec.parse is not None:
        return spec.parse(text)
    kind = spec.kind[-1] if isinstance(spec.kind, tuple) else spec.kind  # (int, float): read as float
    if spec.is_list:
        return [kind(v.strip()) for v in text.split(",") if v.strip()]
    return kind(text)


def _flag_example(spec: Setting) -> str:
    return spec.flag_example or spec.example.replace(", ", ",")
