"""The OpenAI chat-completions request we send, and reading its server-sent-event stream.

Timing follows ``vllm bench serve``: TTFT is the arrival of the first chunk carrying content,
E2E latency the arrival of the last byte. Token counts come from the final ``usage`` chunk
(``stream_options.include_usage``), never from re-tokenising the text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from dspark_bench.scenarios import Mode, Sample


def chat_body(sample: Sample, mode: Mode | str, model: str, max_tokens: int, temperature: float) -> dict[str, Any]:
    """The request body for ``sample`` in ``mode``. Never ``ignore_eos``: JSON must stop where it closes."""
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
    finish_reason: str | None = None
    error: str | None = None
    chunks: int = 0


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
                parts.append(content)
                result.chunks += 1
            if choice.get("finish_reason"):
                result.finish_reason = choice["finish_reason"]
        usage = event.get("usage")
        if usage:
            result.prompt_tokens = usage.get("prompt_tokens")
            result.output_tokens = usage.get("completion_tokens")
    result.text = "".join(parts)
    if result.error is None and result.finish_reason is None:
        result.error = "stream ended without a finish_reason"
    return result
