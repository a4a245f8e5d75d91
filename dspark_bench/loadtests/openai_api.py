"""The OpenAI chat-completions request we send, reading its server-sent-event stream, and the one
non-streaming call (studies and model evaluation). Request defaults live here, and ``RequestSettings``:
how every request of a level is sent, one frozen object that plans carry and that travels whole to
Locust workers and to the locustfile's command line.

Timing follows ``vllm bench serve``: TTFT is the arrival of the first chunk carrying content,
E2E latency the arrival of the last byte. Token counts come from the final ``usage`` chunk
(``stream_options.include_usage``), never from re-tokenising the text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import httpx

from dspark_bench.scenarios import Mode, Sample

MAX_TOKENS = 512  # the article's
TEMPERATURE = 0.0  # the article's; greedy answers are the ones speculation must reproduce exactly
REQUEST_TIMEOUT_S = 120.0  # per request, for the whole answer


@dataclass(frozen=True)
class RequestSettings:
    """How every request of a level is sent."""

    model: str  # the served model name
    mode: Mode  # how JSON is asked for
    max_tokens: int = MAX_TOKENS  # a dataset line's own max_tokens wins
    temperature: float = TEMPERATURE
    request_timeout_s: float = REQUEST_TIMEOUT_S  # for the whole answer
    headers: dict[str, str] = field(default_factory=dict)  # e.g. the bearer key of a --url server

    def as_message(self) -> dict[str, Any]:
        """The settings as JSON-ready data (a Locust message to workers)."""
        return {**asdict(self), "mode": self.mode.value}

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> RequestSettings:
        return cls(**{**data, "mode": Mode(data["mode"]), "headers": dict(data["headers"])})


# The fields a run's config decides, each a RunConfig setting of the same name (``RunConfig.request_settings``);
# model, mode and headers come from the deployed arm. A new one here and on RunConfig reaches the sweep's
# plans, Locust's workers (the settings travel whole) and the locustfile's command line with no other edit.
CONFIG_FIELDS = tuple(f.name for f in fields(RequestSettings) if f.name not in ("model", "mode", "headers"))
# ... as the locustfile's command-line flags: ``ui`` writes them from the config and the locustfile reads
# them back (model, mode and headers have flags of their own there: --served-model, --mode, --api-key-env).
LOCUST_FLAGS = {name: "--" + name.removesuffix("_s").replace("_", "-") for name in CONFIG_FIELDS}


def locust_argv(settings: RequestSettings) -> list[str]:
    return [arg for name, flag in LOCUST_FLAGS.items() for arg in (flag, str(getattr(settings, name)))]


def add_locust_options(group: Any) -> None:
    """The LOCUST_FLAGS options on an argparse group, typed and defaulted by RequestSettings's fields."""
    defaults = {f.name: f.default for f in fields(RequestSettings)}
    for name, flag in LOCUST_FLAGS.items():
        group.add_argument(flag, dest=f"request_{name}", type=type(defaults[name]), default=defaults[name])


def settings_from_locust_options(options: Any, model: str, mode: Mode, headers: dict[str, str]) -> RequestSettings:
    return RequestSettings(model, mode, headers=headers, **{name: getattr(options, f"request_{name}") for name in LOCUST_FLAGS})


def chat_body(
    sample: Sample, mode: Mode | str, model: str, max_tokens: int = MAX_TOKENS, temperature: float = TEMPERATURE
) -> dict[str, Any]:
    """The streaming request body for ``sample`` in ``mode``. Never ``ignore_eos``: JSON must stop where it closes."""
    body: dict[str, Any] = {
        "model": model,
        "messages": sample.messages,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    response_format = sample.response_format(mode)
    if response_format is not None:
        body["response_format"] = response_format
    return body


@dataclass
class StreamResult:
    text: str = ""
    t_first_token: float | None = None
    t_last_byte: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, where the server gives it
    finish_reason: str | None = None
    error: str | None = None
    chunk_times: list[float] = field(default_factory=list)  # arrival of each chunk that carried content


def consume_sse(lines: Iterable[str | bytes], now: Callable[[], float]) -> StreamResult:
    """Read ``data: {...}`` lines until ``data: [DONE]``; stamp times with ``now()`` as lines arrive."""
    result = StreamResult()
    parts: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
        result.t_last_byte = now()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        try:
            event = json.loads(data)
        except ValueError:
            result.error = f"unparseable stream event: {data[:200]}"
            break
        if "error" in event:
            result.error = str(
                event["error"].get("message", event["error"]) if isinstance(event["error"], dict) else event["error"]
            )
            break
        for choice in event.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if content:
                if result.t_first_token is None:
                    result.t_first_token = result.t_last_byte
                if not result.chunk_times or result.chunk_times[-1] != result.t_last_byte:
                    result.chunk_times.append(result.t_last_byte)  # one event may carry several choices
                parts.append(content)
            if choice.get("finish_reason"):
                result.finish_reason = choice["finish_reason"]
        usage = event.get("usage")
        if usage:
            result.prompt_tokens = usage.get("prompt_tokens")
            result.output_tokens = usage.get("completion_tokens")
            if isinstance(details := usage.get("prompt_tokens_details"), dict):
                result.cached_tokens = details.get("cached_tokens")
    result.text = "".join(parts)
    if result.error is None and result.finish_reason is None:
        result.error = "stream ended without a finish_reason"
    return result


def ask(
    base_url: str,
    model: str,
    messages: list[dict[str, str]],
    *,
    response_format: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    max_tokens: int = MAX_TOKENS,
    temperature: float = TEMPERATURE,
    timeout_s: float = REQUEST_TIMEOUT_S,
    **extra: Any,
) -> dict[str, Any]:
    """One non-streaming chat completion, as the server's JSON (``choices``, ``usage``).
    ``extra`` goes into the body as is (e.g. ``logprobs=True, top_logprobs=2``). Raises httpx errors."""
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature, **extra}
    if response_format is not None:
        body["response_format"] = response_format
    response = httpx.post(f"{base_url}/v1/chat/completions", json=body, headers=headers or {}, timeout=timeout_s)
    response.raise_for_status()
    return response.json()
