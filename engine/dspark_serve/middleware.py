"""ASGI middleware loaded into vLLM's OpenAI server (``--middleware``): the default response format,
the ``/dspark/status`` endpoint, and DSpark's Prometheus metrics beside vLLM's on ``/metrics``
(drafted and accepted tokens are vLLM's own ``vllm:spec_decode_*`` counters; grammar-forced tokens
and the drafter's step counts come from the engine process: grammar_counter, speculation_gate). Configured through the DSPARK_STATUS and
DSPARK_STATE_DIR environment variables, which the launcher sets before vLLM starts."""

from __future__ import annotations

import json
import os
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from dspark_serve.hooks import method_counter
from dspark_serve.state import (
    ASYNC_CAP_HOW,
    HOOKED_METHODS,
    MEASURES,
    SCHEMA_STATE_FILE,
    STATE_DIR_ENV,
    STATUS_ENV,
    mean_acceptance_length,
    read_counters,
)

STATUS_PATH = "/dspark/status"
CHAT_PATHS = ("/v1/chat/completions", "/v1/completions")

DEFAULTED_TO_JSON = Counter(
    "dspark_default_json_requests", "Requests without response_format that --response-format json constrained to JSON"
)
ACTIVE = Gauge("dspark_info", "What DSpark turned on (value 1)", ["drafter", "speculative_length", "response_format"])
SCHEMAS_REFUSED = Counter("dspark_schemas_refused", "Requests answered 400: their schema does not compile into a grammar")
SCHEMAS_COMPILED = Gauge("dspark_schemas_compiled", "Schemas compiled into the grammar cache at start-up")
# vLLM's own speculation counters, read back for /dspark/status (their Prometheus names, without _total)
VLLM_SPEC_COUNTERS = {
    "drafted_tokens": "vllm:spec_decode_num_draft_tokens",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
    "drafts": "vllm:spec_decode_num_drafts",
}


# The engine's counters on /metrics: (counter in state.COUNTERS, help); each as dspark_<counter>_total.
EXPORTED_COUNTERS = (
    ("grammar_forced_tokens", "Output tokens at positions where the request's grammar allowed exactly one token"),
    ("constrained_tokens", "Output tokens generated under a grammar (JSON)"),
    ("engine_steps", "Engine steps that ran the model"),
    ("drafter_steps", "Engine steps after which the drafter ran (the rest: no running request's drafts were landing)"),
    ("probe_steps", "Drafter runs while no request asked for drafts, to see whether drafts land again"),
    ("stock_steps", "Engine steps the worker ran as stock vLLM's: no drafts to verify, and nothing for the drafter after them"),
    ("grammar_draft_tokens", "Draft tokens verified that were the grammar's forced text (no drafter pass)"),
    ("grammar_drafts_accepted", "Of those, the ones the target accepted: output tokens that came from grammar drafts"),
    ("repeat_draft_tokens", "Draft tokens verified that repeated the request's own text (no drafter pass)"),
    ("repeat_drafts_accepted", "Of those, the ones the target accepted: output tokens that came from repeat drafts"),
    ("carried_draft_steps", "Engine steps whose drafts came back with the step's sampled tokens"),
    ("fetched_draft_steps", "Engine steps whose drafts the engine core asked the worker for, in a round trip of their own"),
    ("async_steps", "Engine steps scheduled asynchronously, where the acceptance cap cuts each request's draft placeholders"),
    ("plain_steps", "Engine steps the governor ran with speculation off, because it measured plain steps faster"),
    ("governor_switches", "Times the governor turned speculation off or on again"),
    ("async_forced_tokens", "Forced-text tokens the engine core sent to the worker's drafts under asynchronous scheduling"),
    ("async_structure_tokens", "Structure-memory tokens the engine core sent to the worker's drafts under asynchronous scheduling"),
    ("engine_hook_us", "Microseconds DSpark's own hooks took in the engine core (scheduler, engine core, grammar), vLLM's methods excluded"),
    ("worker_hook_us", "Microseconds DSpark's own hooks took in the worker (model runner, drafters), vLLM's methods excluded"),
)
# The speculation gate's latest measurements, as gauges (state.MEASURES names them): what its choices were made from.
MEASURE_HELP = {
    "step_fixed_us": "A step's fixed cost as the gate measured it, in microseconds",
    "step_per_position_us": "One more scheduled position's cost as the gate measured it, in microseconds",
    "drafter_pass_us": "The drafter's pass as the gate measured it, in microseconds (0: not yet told apart)",
    "drafts_pay_to_batch": "The largest batch at which the gate measured a drafter pass to pay",
}


class EngineCountsCollector:
    """Prometheus collector for the counts and measurements the engine process keeps in DSPARK_STATE_DIR."""

    def collect(self):
        counts = engine_counts()
        for name, description in EXPORTED_COUNTERS:
            yield CounterMetricFamily(f"dspark_{name}", description, value=counts.get(name, 0))
        by_method = CounterMetricFamily(
            "dspark_hook_us", "Microseconds DSpark's own hooks took on each vLLM method it wraps, vLLM's own time excluded", labels=["method"]
        )
        for method in HOOKED_METHODS:
            by_method.add_metric([method], counts.get(method_counter(method), 0))
        yield by_method
        for name in MEASURES:
            yield GaugeMetricFamily(f"dspark_{name}", MEASURE_HELP[name], value=counts.get(name, 0))


def status() -> dict[str, Any]:
    return json.loads(os.environ.get(STATUS_ENV, "{}"))


def with_default_format(body: bytes) -> bytes:
    """Add ``response_format: json_object`` to a request that does not say how to answer.

    Left as sent: a request that names ``response_format`` at all (``{"type": "text"}`` asks for free
    text; an explicit ``null`` says "no format", as the OpenAI API reads it), one that carries other
    structured-output fields, and one that carries ``tools`` (its answer may be a tool call, which vLLM's
    tool parser reads from free text: forcing a JSON object would break it)."""
    try:
        request = json.loads(body)
    except ValueError:
        return body  # let vLLM report the malformed body
    if not isinstance(request, dict) or "response_format" in request or "tools" in request:
        return body
    if "structured_outputs" in request or "guided_json" in request:
        return body
    request["response_format"] = {"type": "json_object"}
    return json.dumps(request).encode()


def requested_schema(body: bytes) -> dict[str, Any] | None:
    """The JSON Schema a chat request's ``response_format`` carries, if any."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    response_format = request.get("response_format") if isinstance(request, dict) else None
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    schema = (response_format.get("json_schema") or {}).get("schema")
    return schema if isinstance(schema, dict) else None


class SchemaCheck:
    """Compiles each request's JSON Schema with the compiler vLLM uses (xgrammar, this model's vocabulary),
    once per schema, before the request reaches the engine. A schema the compiler rejects (e.g. an
    integer bound beyond 64 bits) would otherwise fail inside generation and reach the client as HTTP 500
    "Internal server error"; here it is a 400 that names the problem. Schemas that compile are cached,
    which makes --dspark-schema-compile apply to schemas first seen at run time too."""

    def __init__(self, model_dir: str | None, cache_size: int = 1024) -> None:
        self.model_dir = model_dir
        self._compiler = None
        self._errors: dict[str, str | None] = {}
        self.cache_size = cache_size

    def _compiler_for_model(self):
        if self._compiler is None:
            import xgrammar as xgr
            from transformers import AutoConfig, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
            vocab_size = AutoConfig.from_pretrained(self.model_dir).vocab_size
            self._compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size))
        return self._compiler

    def problem(self, schema: dict[str, Any]) -> str | None:
        """None when the schema compiles; else the compiler's message, on one line."""
        key = json.dumps(schema, sort_keys=True)
        if key not in self._errors:
            if len(self._errors) >= self.cache_size:
                self._errors.clear()
            try:
                self._compiler_for_model().compile_json_schema(key, any_whitespace=True)
                self._errors[key] = None
            except Exception as exc:  # noqa: BLE001 - xgrammar raises RuntimeError and ValueError alike
                message = " ".join(str(exc).split())
                self._errors[key] = message.split(": ", 1)[-1] if "Check failed" in message else message
        return self._errors[key]


def bad_request(message: str) -> bytes:
    """An OpenAI-style error body, as vLLM answers a request it refuses."""
    return json.dumps({"error": {"message": message, "type": "BadRequestError", "param": "response_format", "code": 400}}).encode()


class DSparkMiddleware:
    def __init__(self, app) -> None:
        self.app = app
        self.facts = status()
        self.default_json = self.facts.get("response_format") == "json"
        self.schema_check = SchemaCheck(self.facts.get("model")) if self.facts.get("enabled") else None
        if self.facts.get("enabled"):
            ACTIVE.labels(
                str(self.facts.get("drafter")), str(self.facts.get("speculative_length")), str(self.facts.get("response_format"))
            ).set(1)
            SCHEMAS_COMPILED.set_function(lambda: float(_live_facts().get("schemas_compiled", 0)))
            REGISTRY.register(EngineCountsCollector())

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        if path == STATUS_PATH and scope.get("method") == "GET":
            counts = engine_counts()
            facts = {**self.facts, "acceptance_cap": observed_cap(self.facts.get("acceptance_cap"), counts)}
            payload = json.dumps({**facts, **_live_facts(), **counts, **speculation_counts()}).encode()
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": payload})
            return None
        if (self.default_json or self.schema_check) and path in CHAT_PATHS and scope.get("method") == "POST":
            body = b""
            more = True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
            if self.default_json:
                original, body = body, with_default_format(body)
                if body is not original:
                    DEFAULTED_TO_JSON.inc()
            schema = requested_schema(body) if self.schema_check else None
            if schema is not None and self.schema_check and (problem := self.schema_check.problem(schema)) is not None:
                SCHEMAS_REFUSED.inc()
                payload = bad_request(f"the response_format schema cannot be compiled into a grammar: {problem}")
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
                await send({"type": "http.response.start", "status": 400, "headers": headers})
                await send({"type": "http.response.body", "body": payload})
                return None
            headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            scope = {**scope, "headers": headers}
            sent = False

            async def replay():
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            return await self.app(scope, replay, send)
        return await self.app(scope, receive, send)


def observed_cap(expected: str | None, counts: dict[str, int]) -> str | None:
    """Whether the acceptance cap acts, and on which scheduling path, as the engine's steps show once it has
    run. Before any step (or with the cap off), what dspark-serve expected. Pure."""
    if expected is None or expected.startswith("off") or not counts.get("engine_steps"):
        return expected
    if counts.get("async_steps"):
        return f"active (asynchronous scheduling, {counts['async_steps']} of {counts['engine_steps']} steps: {ASYNC_CAP_HOW})"
    return "active"


def engine_counts() -> dict[str, int]:
    state_dir = os.environ.get(STATE_DIR_ENV)
    return read_counters(state_dir) if state_dir and os.path.isdir(state_dir) else {}


def speculation_counts() -> dict[str, float]:
    """vLLM's drafted / accepted token totals in this server, and the mean acceptance length."""
    found = {key: 0.0 for key in VLLM_SPEC_COUNTERS}
    wanted = {f"{name}_total": key for key, name in VLLM_SPEC_COUNTERS.items()}
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            if sample.name in wanted:
                found[wanted[sample.name]] += sample.value
    if (mean := mean_acceptance_length(found["drafts"], found["accepted_tokens"])) is not None:
        found["mean_acceptance_length"] = round(mean, 3)
    return found


def _live_facts() -> dict[str, Any]:
    """What the schema precompile thread has written so far (schemas compiled, failures)."""
    state_dir = os.environ.get(STATE_DIR_ENV)
    live: dict[str, Any] = {}
    if state_dir and os.path.exists(path := os.path.join(state_dir, SCHEMA_STATE_FILE)):
        with open(path, encoding="utf-8") as f:
            live.update(json.load(f))
    return live
