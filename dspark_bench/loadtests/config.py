"""What a run is: a YAML file, with command-line flags overriding it, checked before anything starts."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from dspark_bench.files import FileProblem, read_yaml_mapping
from dspark_bench.loadtests.arms import BUILTIN_ARMS, Arm
from dspark_bench.loadtests.deploy.gpustack_spec import GPUStackSpecError, parse_settings
from dspark_bench.loadtests.metrics import MIN_WAVES, SLO_KEYS
from dspark_bench.loadtests.openai_api import MAX_TOKENS, REQUEST_TIMEOUT_S, TEMPERATURE, RequestSettings
from dspark_bench.scenarios import Mode, ScenarioError, builtin_names, load_scenario

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = REPO_ROOT / "models" / "tiny-json"
DEFAULT_LEVELS = (1, 2, 4, 8, 16, 32, 64)


class ConfigError(ValueError):
    """A run configuration that cannot work; the message names the setting and the fix."""


@dataclass(frozen=True)
class RunConfig:
    model: str = str(DEFAULT_MODEL)
    scenarios: tuple[str, ...] = ("order_extraction",)
    mode: Mode = Mode.JSON_OBJECT  # for arms that do not force one (the article's DSpark arm: json_object)
    arms: tuple[str, ...] = ("baseline", "baseline-constrained", "dspark")
    levels: tuple[int, ...] = DEFAULT_LEVELS  # closed loop: users per level
    rates: tuple[float, ...] = ()  # open loop instead: requests per second per level (levels then unused)
    arrival: str = "poisson"  # open loop: poisson or constant gaps
    max_concurrency: int = 256  # open loop: users sending the due requests, the cap on requests in flight
    workers: int = 0  # Locust worker processes that send the requests (0: the users run in the sweep's process)
    requests_per_level: int = 200  # at least; a closed loop runs whole waves of its users, MIN_WAVES at least
    warmup_requests: int = 2
    repeats: int = 1
    max_tokens: int = MAX_TOKENS
    temperature: float = TEMPERATURE
    request_timeout_s: float = REQUEST_TIMEOUT_S
    startup_timeout_s: float = 600.0
    level_timeout_s: float = 3600.0
    output_dir: str = "runs"
    run_name: str | None = None
    urls: dict[str, str] = field(default_factory=dict)  # arm -> base URL: use running servers
    api_key_env: str = "OPENAI_API_KEY"
    served_model_name: str | None = None
    server_args: tuple[str, ...] = ("--dtype", "bfloat16", "--max-model-len", "1024")  # given to every local arm
    custom_arms: tuple[Arm, ...] = ()
    slo: dict[str, float] = field(default_factory=dict)  # ttft_ms / tpot_ms / e2e_ms: goodput counts requests within all
    gpustack: dict[str, Any] | None = None  # deploy the arms on a GPUStack cluster (loadtests/gpustack_spec.py)

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
        return RequestSettings(model, mode, self.max_tokens, self.temperature, self.request_timeout_s, headers)

    def measured_requests(self, level: float) -> int:
        """Measured requests of one level: ``requests_per_level``; a closed loop of N users measures at least
        MIN_WAVES waves of N (no level is a single burst, whose concurrency holds by construction) and is
        raised to whole waves, warm-up included (none ends in a part-wave that leaves users idle)."""
        if self.rates:
            return self.requests_per_level
        users = int(level)
        measured = max(self.requests_per_level, MIN_WAVES * users)
        return -(-(measured + self.warmup_requests) // users) * users - self.warmup_requests


_LIST_FIELDS = {"scenarios", "arms", "levels", "rates", "server_args"}
# The type each scalar or mapping setting must have in a YAML file (flags arrive already typed).
_SHAPES: dict[str, type | tuple[type, ...]] = {
    "model": str,
    "requests_per_level": int,
    "warmup_requests": int,
    "repeats": int,
    "max_tokens": int,
    "temperature": (int, float),
    "request_timeout_s": (int, float),
    "startup_timeout_s": (int, float),
    "level_timeout_s": (int, float),
    "output_dir": str,
    "run_name": str,
    "urls": dict,
    "api_key_env": str,
    "served_model_name": str,
    "gpustack": dict,
    "mode": str,
    "slo": dict,
    "arrival": str,
    "max_concurrency": int,
    "workers": int,
}
_EXAMPLES = {
    "model": "models/tiny-json",
    "requests_per_level": "200",
    "warmup_requests": "2",
    "repeats": "3",
    "max_tokens": "512",
    "temperature": "0.0",
    "request_timeout_s": "120",
    "startup_timeout_s": "600",
    "level_timeout_s": "3600",
    "output_dir": "runs",
    "run_name": "my-run",
    "urls": "{baseline: http://host:8000}",
    "api_key_env": "OPENAI_API_KEY",
    "served_model_name": "tiny-json",
    "gpustack": "{url: http://host, model_path: /models/m}",
    "mode": "json_object",
    "slo": "{ttft_ms: 500, e2e_ms: 2000}",
    "scenarios": "order_extraction, tool_call",
    "arms": "baseline, dspark",
    "levels": "1, 8, 64",
    "rates": "1, 2, 4, 8",
    "arrival": "poisson",
    "max_concurrency": "256",
    "workers": "2",
    "server_args": "--dtype, bfloat16",
}


def _fail(setting: str, problem: str, fix: str) -> None:
    raise ConfigError(f"setting '{setting}': {problem}; fix: {fix}")


def _parse_arm(raw: Any) -> Arm:
    if not isinstance(raw, dict) or "name" not in raw:
        _fail("custom_arms", f"{raw!r} is not a mapping with a name", "write '- {name: x, server_args: [...], mode: prompt}'")
    unknown = set(raw) - {"name", "description", "server_args", "launcher", "mode", "primed"}
    if unknown:
        _fail(
            f"custom_arms.{raw['name']}",
            f"unknown keys {sorted(unknown)}",
            "use name, description, server_args, launcher, mode, primed",
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
        launcher=str(raw.get("launcher", "vllm")),
        mode=Mode(mode) if mode else None,
        primed=raw.get("primed", False),
    )


def load_config(path: str | Path | None = None, **overrides: Any) -> RunConfig:
    """Defaults, then the YAML file, then ``overrides`` (CLI flags; None means 'not given')."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            values.update(read_yaml_mapping(path, "see loadtests/configs/"))
        except FileProblem as exc:
            raise ConfigError(f"config file {exc}") from None
    values.update({k: v for k, v in overrides.items() if v is not None})
    known = {f.name for f in fields(RunConfig)}
    for key in values:
        if key not in known:
            _fail(key, "unknown setting", f"use one of {', '.join(sorted(known))}")
    for key in _LIST_FIELDS & set(values):
        if isinstance(values[key], str):
            values[key] = [v.strip() for v in values[key].split(",") if v.strip()]
        elif isinstance(values[key], int | float) and not isinstance(values[key], bool) and key in ("levels", "rates"):
            values[key] = [values[key]]  # "levels: 8" means one level
        if not isinstance(values[key], list | tuple):
            _fail(key, f"{values[key]!r} is not a list", f"write a list, e.g. {key}: [{_EXAMPLES[key]}]")
        values[key] = tuple(values[key])
    for key, shape in _SHAPES.items():
        kinds = shape if isinstance(shape, tuple) else (shape,)
        if key in values and (not isinstance(values[key], kinds) or isinstance(values[key], bool)):
            wanted = " or ".join(k.__name__ for k in kinds)
            _fail(key, f"{values[key]!r} is a {type(values[key]).__name__}, not a {wanted}", f"write e.g. {key}: {_EXAMPLES[key]}")
    if "custom_arms" in values:
        if not isinstance(values["custom_arms"], list | tuple):
            _fail("custom_arms", "not a list", "write a list of arms: '- {name: x, server_args: [...]}'")
        values["custom_arms"] = tuple(_parse_arm(a) for a in values["custom_arms"])
    if "mode" in values:
        if str(values["mode"]) not in {Mode.PROMPT, Mode.JSON_OBJECT, Mode.JSON_SCHEMA}:
            _fail("mode", f"unknown mode {values['mode']!r}", "use prompt, json_object or json_schema")
        values["mode"] = Mode(values["mode"])
    config = replace(RunConfig(), **values)
    return validate_config(config)


def validate_config(config: RunConfig) -> RunConfig:
    """The config, with levels as integers, or ConfigError naming the first setting that cannot work."""
    for key in ("scenarios", "arms", "server_args"):
        for item in getattr(config, key):
            if not isinstance(item, str):
                _fail(key, f"{item!r} is not a string", f"write e.g. {key}: [{_EXAMPLES[key]}]")
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
        ("max_tokens", config.max_tokens, 1),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            _fail(name, f"{value!r} is not an integer >= {low}", f"give an integer >= {low}")
    for name, value in (
        ("request_timeout_s", config.request_timeout_s),
        ("startup_timeout_s", config.startup_timeout_s),
        ("level_timeout_s", config.level_timeout_s),
    ):
        if value <= 0:
            _fail(name, f"{value!r} seconds is not a positive time", f"write e.g. {name}: {_EXAMPLES[name]}")
    for key, limit in config.slo.items():
        if key not in SLO_KEYS:
            _fail(f"slo.{key}", "unknown objective", f"use {', '.join(SLO_KEYS)}")
        if not isinstance(limit, int | float) or isinstance(limit, bool) or limit <= 0:
            _fail(f"slo.{key}", f"{limit!r} is not a positive number of milliseconds", f"write e.g. slo: {_EXAMPLES['slo']}")
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
    elif not Path(config.model).is_dir():
        _fail("model", f"{config.model} is not a model directory", "give a local HF model folder (default: models/tiny-json)")
    return replace(config, levels=levels, rates=tuple(float(r) for r in rates))


