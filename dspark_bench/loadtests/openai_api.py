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
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import KW_ONLY, asdict, dataclass, field, fields
from typing import Any, get_args, get_type_hints

import httpx
from geventhttpclient import HTTPClient
from geventhttpclient.url import URL

from dspark_bench.scenarios import Mode, Sample

MAX_TOKENS = 512  # the article's
TEMPERATURE = 0.0  # the article's; greedy answers are the ones speculation must reproduce exactly
REQUEST_TIMEOUT_S = 120.0  # per request, for the whole answer
# A RequestSettings field with this metadata goes into every request body under its own name (a None value
# stays out: the server's default, which for vLLM is the model's generation config).
WIRE = {"wire": True}


@dataclass(frozen=True)
class RequestSettings:
    """How every request of a level is sent. A new sampling setting is a field here with ``metadata=WIRE``
    and a RunConfig setting of the same name: ``body`` sends it, plans and Locust workers carry it."""

    model: str = field(metadata=WIRE)  # the served model name
    mode: Mode  # how JSON is asked for
    _: KW_ONLY
    max_tokens: int = field(default=MAX_TOKENS, metadata=WIRE)  # a dataset line's own max_tokens wins
    temperature: float = field(default=TEMPERATURE, metadata=WIRE)
    top_p: float | None = field(default=None, metadata=WIRE)  # None: the server's default
    request_timeout_s: float = REQUEST_TIMEOUT_S  # for the whole answer
    headers: dict[str, str] = field(default_factory=dict)  # e.g. the bearer key of a --url server

    def body(self, sample: Sample, *, stream: bool = True) -> dict[str, Any]:
        """The chat-completions body for ``sample``: every WIRE field, the sample's own max_tokens where it
        has one, its response_format in this mode, and the usage chunk when streaming. Never ``ignore_eos``:
        JSON must stop where it closes."""
        body: dict[str, Any] = {"messages": sample.messages}
        for f in fields(self):
            if f.metadata.get("wire") and (value := getattr(self, f.name)) is not None:
                body[f.name] = value
        if sample.max_tokens:
            body["max_tokens"] = sample.max_tokens
        if stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        response_format = sample.response_format(self.mode)
        if response_format is not None:
            body["response_format"] = response_format
        return body

    def as_message(self) -> dict[str, Any]:
        """The settings as JSON-ready data (a Locust message to workers)."""
        return {**asdict(self), "mode": self.mode.value}

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> RequestSettings:
        return cls(**{**data, "mode": Mode(data["mode"]), "headers": dict(data["headers"])})


# The fields a run's config decides, each a RunConfig setting of the same name (``RunConfig.request_settings``);
# model, mode and headers come from the deployed arm. A new one here and on RunConfig reaches the sweep's
# plans, Locust's workers (the settings travel whole), the locustfile's command line and the wire with no
# other edit.
CONFIG_FIELDS = tuple(f.name for f in fields(RequestSettings) if f.name not in ("model", "mode", "headers"))
# ... as the locustfile's command-line flags: ``ui`` writes them from the config and the locustfile reads
# them back (model, mode and headers have flags of their own there: --served-model, --mode, --api-key-env).
LOCUST_FLAGS = {name: "--" + name.removesuffix("_s").replace("_", "-") for name in CONFIG_FIELDS}


def _flag_type(name: str) -> type:
    """The scalar type of a RequestSettings field (``float`` for ``float | None``)."""
    hint = get_type_hints(RequestSettings)[name]
    return next(t for t in get_args(hint) if t is not type(None)) if get_args(hint) else hint


def locust_argv(settings: RequestSettings) -> list[str]:
    return [arg for name, flag in LOCUST_FLAGS.items() if (value := getattr(settings, name)) is not None for arg in (flag, str(value))]


def add_locust_options(group: Any) -> None:
    """The LOCUST_FLAGS options on an argparse group, typed and defaulted by RequestSettings's fields."""
    defaults = {f.name: f.default for f in fields(RequestSettings)}
    for name, flag in LOCUST_FLAGS.items():
        group.add_argument(flag, dest=f"request_{name}", type=_flag_type(name), default=defaults[name])


def settings_from_locust_options(options: Any, model: str, mode: Mode, headers: dict[str, str]) -> RequestSettings:
    return RequestSettings(model, mode, headers=headers, **{name: getattr(options, f"request_{name}") for name in LOCUST_FLAGS})


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


def lines_until(chunks: Iterator[bytes], deadline: float) -> Iterator[bytes]:
    """Non-empty lines of a byte stream, with a deadline (``time.monotonic``) on the whole answer (a lean
    splitter: CPU the client spends at high concurrency on a small machine is taken from the server under test)."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
        if time.monotonic() > deadline:
            raise TimeoutError
    if buffer.strip():
        yield buffer


def error_message(status: int, text: str) -> str:
    """``HTTP 400: <the server's message>``: the OpenAI error object's message where the body is one."""
    message: object = text
    try:
        error = json.loads(text).get("error", {})
        message = error.get("message", text) if isinstance(error, dict) else error
    except (ValueError, AttributeError):
        pass
    return f"HTTP {status}: {' '.join(str(message).split())[:300]}"


@dataclass
class ChatOutcome:
    """One streamed chat completion as the client saw it: what came back, or why nothing did."""

    t_send: float
    t_headers: float | None = None  # the response's status line and headers arrived
    status: int | None = None  # None: no HTTP answer at all (refused, reset, timed out before headers)
    stream: StreamResult | None = None  # an HTTP 200's events
    error: str | None = None
    timed_out: bool = False


def chat_client(base_url: str, settings: RequestSettings) -> HTTPClient:
    """One connection to ``base_url`` for ``send_chat``. geventhttpclient (the client behind Locust's FastHttpUser)
    parses HTTP in C: at 64 streams on a small machine a pure-Python client takes CPU from the server under test
    and reads chunks late."""
    return HTTPClient.from_url(URL(base_url), concurrency=1, network_timeout=settings.request_timeout_s, connection_timeout=10.0)


def send_chat(client: HTTPClient, settings: RequestSettings, sample: Sample) -> ChatOutcome:
    """The one request every load caller sends (the Locust user, the sweep's smoke test):
    ``settings.body(sample)`` posted on ``client`` (geventhttpclient, whose C parser keeps the client's CPU
    small), its events read within ``settings.request_timeout_s``. Transport failures become ``error``; a
    greenlet killed in flight (Locust stopping the user) propagates."""
    outcome = ChatOutcome(t_send=time.time())
    response = None
    try:
        response = client.post(
            "/v1/chat/completions",
            body=json.dumps(settings.body(sample)).encode(),
            headers={"Content-Type": "application/json", **settings.headers},
        )
        outcome.t_headers = time.time()
        outcome.status = response.status_code
        if outcome.status != 200:
            outcome.error = error_message(response.status_code, response.read().decode(errors="replace"))
            return outcome
        deadline = time.monotonic() + settings.request_timeout_s
        lines = iter(lambda: response.readline(b"\n"), b"")
        outcome.stream = consume_sse(lines_until(lines, deadline), time.time)
        outcome.error = outcome.stream.error
        # Read past "data: [DONE]" to the end of the body: a response left unread is not reusable, so the
        # connection would close and the next request reconnect (and resolve the host through gevent's
        # thread pool), which at high concurrency queues users on the client.
        for _ in lines_until(lines, deadline):
            pass
    except TimeoutError:
        outcome.timed_out, outcome.error = True, f"no complete answer within {settings.request_timeout_s:.0f}s"
    except Exception as exc:  # noqa: BLE001 - any transport failure is an http_error verdict
        outcome.error = f"{type(exc).__name__}: {exc}"
    finally:
        if response is not None:
            response.release()
    return outcome


def ask(base_url: str, settings: RequestSettings, sample: Sample, **extra: Any) -> dict[str, Any]:
    """One non-streaming chat completion of ``settings.body(sample)``, as the server's JSON (``choices``,
    ``usage``), for studies and model evaluation. ``extra`` goes into the body as is (e.g. ``logprobs=True,
    top_logprobs=2``). Raises httpx errors."""
    body = {**settings.body(sample, stream=False), **extra}
    response = httpx.post(f"{base_url}/v1/chat/completions", json=body, headers=settings.headers, timeout=settings.request_timeout_s)
    response.raise_for_status()
    return response.json()
