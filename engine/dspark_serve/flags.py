"""The article's flags, parsed out of a vLLM command line and checked before any model loads. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dspark_serve.engine_config import SWITCHES


class FlagError(ValueError):
    """A DSpark flag that cannot work; the message says what is wrong and how to fix it."""


@dataclass(frozen=True)
class DSparkOptions:
    enabled: bool = False
    response_format: str = "none"  # "json": requests without response_format are constrained to JSON
    speculative_length: int | None = None  # None: the drafter's own longest (Drafter.longest); the gate measures how many pay
    schema_dir: Path | None = None
    schema_compile: bool = True
    drafter: str = "auto"  # see DRAFTERS
    draft_model: Path | None = None
    # EngineConfig switches given as flags (--dspark-repeat-drafts, --no-dspark-governor, ...): they win over
    # the environment's (engine_config.SWITCHES); absent ones are left to it
    features: dict[str, bool] = field(default_factory=dict)


MIN_LENGTH, MAX_LENGTH = 1, 16
# One flag per engine feature, on by default: --dspark-repeat-drafts[=false], --no-dspark-repeat-drafts, ...
FEATURE_FLAGS = {"--dspark-" + name.replace("_", "-"): name for name in SWITCHES}
# auto: native DSpark weights on a GPU, else the checkpoint's draft model, else structure.
DRAFTERS = ("auto", "native", "draft-model", "structure", "ngram", "replay", "off")


def _value(argv: list[str], i: int, flag: str, hint: str) -> tuple[str, int]:
    arg = argv[i]
    if "=" in arg:
        return arg.split("=", 1)[1], i + 1
    if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
        raise FlagError(f"{flag} needs a value; fix: {hint}")
    return argv[i + 1], i + 2


SWITCH_WORDS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


def _switch(argv: list[str], i: int, flag: str) -> tuple[bool, int]:
    """A switch given bare (on), or with a value as ``--flag=false`` or ``--flag false``; anything else after
    it is left to vLLM, since a value that is no switch word would otherwise reach vLLM as a stray argument."""
    arg = argv[i]
    if "=" in arg:
        word = arg.split("=", 1)[1]
    elif i + 1 < len(argv) and argv[i + 1].lower() in SWITCH_WORDS:
        word, i = argv[i + 1], i + 1
    else:
        return True, i + 1
    if word.lower() not in SWITCH_WORDS:
        raise FlagError(f"{flag}={word!r} is not true or false; fix: {flag} (on), {flag}=false or --no-{flag[2:]} (off)")
    return SWITCH_WORDS[word.lower()], i + 1


def positional_model(argv: list[str]) -> list[str]:
    """Accept ``vllm serve``'s shape, ``[serve] MODEL --flags``, as GPUStack's vLLM backend launches it."""
    argv = argv[1:] if argv[:1] == ["serve"] else list(argv)
    if argv and not argv[0].startswith("-"):
        return ["--model", argv[0], *argv[1:]]
    return argv


def parse(argv: list[str]) -> tuple[DSparkOptions, list[str]]:
    """Split ``argv`` into DSpark options and the vLLM arguments left over (order kept)."""
    argv = positional_model(argv)
    opts: dict = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if name == "--dspark-enabled":
            opts["enabled"], i = _switch(argv, i, name)
        elif name == "--no-dspark-enabled":
            opts["enabled"], i = False, i + 1
        elif name == "--response-format":
            value, i = _value(argv, i, name, "--response-format json (or none)")
            if value not in ("json", "none"):
                raise FlagError(f"--response-format {value!r} is not supported; fix: use --response-format json (or none)")
            opts["response_format"] = value
        elif name == "--dspark-speculative-length":
            value, i = _value(argv, i, name, "--dspark-speculative-length 5")
            try:
                length = int(value)
            except ValueError:
                raise FlagError(f"--dspark-speculative-length {value!r} is not an integer; fix: use 1-16, e.g. 5") from None
            if not MIN_LENGTH <= length <= MAX_LENGTH:
                raise FlagError(
                    f"--dspark-speculative-length {length} is out of range; fix: use {MIN_LENGTH}-{MAX_LENGTH} (the article uses 5)"
                )
            opts["speculative_length"] = length
        elif name == "--dspark-schema-compile":
            opts["schema_compile"] = True
            i += 1
            if "=" in arg:
                opts["schema_dir"] = Path(arg.split("=", 1)[1])
            elif i < len(argv) and not argv[i].startswith("--"):
                opts["schema_dir"], i = Path(argv[i]), i + 1
        elif name == "--dspark-drafter":
            value, i = _value(argv, i, name, f"--dspark-drafter {'|'.join(DRAFTERS)}")
            if value not in DRAFTERS:
                raise FlagError(f"--dspark-drafter {value!r} is unknown; fix: use one of {', '.join(DRAFTERS)}")
            opts["drafter"] = value
        elif name == "--dspark-draft-model":
            value, i = _value(argv, i, name, "--dspark-draft-model DIR (a small model with the same tokenizer)")
            opts["draft_model"] = Path(value)
        elif name == "--no-dspark-schema-compile":
            opts["schema_compile"], i = False, i + 1
        elif name in FEATURE_FLAGS:
            on, i = _switch(argv, i, name)
            opts.setdefault("features", {})[FEATURE_FLAGS[name]] = on
        elif name.startswith("--no-") and "--" + name[5:] in FEATURE_FLAGS:
            opts.setdefault("features", {})[FEATURE_FLAGS["--" + name[5:]]] = False
            i += 1
        else:
            rest.append(arg)
            i += 1
    options = DSparkOptions(**opts)
    check(options, rest)
    return options, rest


def check(options: DSparkOptions, vllm_argv: list[str]) -> None:
    if options.schema_dir is not None and not options.schema_dir.is_dir():
        raise FlagError(f"--dspark-schema-compile {options.schema_dir}: no such folder; fix: give a folder of *.json schemas")
    if options.draft_model is not None and not (options.draft_model / "config.json").is_file():
        raise FlagError(f"--dspark-draft-model {options.draft_model}: no model there (no config.json); fix: give a model folder")
    if options.enabled and "--no-enable-prefix-caching" in vllm_argv:
        raise FlagError("dspark requires prefix-caching; fix: drop --no-enable-prefix-caching (or add --enable-prefix-caching)")
