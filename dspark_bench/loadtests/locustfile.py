"""The Locust user: posts streaming chat completions, validates each answer, records it.

Used two ways:
- by the sweep (``python -m loadtests bench``), which sets ``environment.plan`` for each level;
- directly under Locust's own CLI or web UI::

    locust -f loadtests/locustfile.py --host http://127.0.0.1:8000 --scenario order_extraction \\
        --mode json_object --run-dir runs/ui

Closed loop: no wait between requests, so concurrency is the number of users. Invalid answers are
reported to Locust as failures named by their verdict, so its UI shows them beside HTTP errors.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import gevent
import httpx
from geventhttpclient import HTTPClient
from geventhttpclient.url import URL
from locust import User, constant, events, task
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner

from dspark_bench.loadtests import ui_stats  # noqa: F401 - registers the web UI's JSON tab and its worker reports
from dspark_bench.loadtests.openai_stream import chat_body, consume_sse
from dspark_bench.loadtests.records import RecordSink, RequestRecord
from dspark_bench.loadtests.validate import Verdict, validate
from dspark_bench.scenarios import Mode, Sample, Split, load_scenario


@dataclass
class LevelPlan:
    """The requests of one level for one arm: warm-up tickets first, then exactly ``count`` measured."""

    arm: str
    level: int
    mode: Mode
    model: str
    samples: list[Sample]  # cycled if shorter than warmup + count
    sink: RecordSink
    count: int | None  # None: run until stopped (Locust UI)
    warmup: int = 0
    repeat: int = 0
    max_tokens: int = 512
    temperature: float = 0.0
    timeout_s: float = 120.0
    headers: dict[str, str] = field(default_factory=dict)
    _issued: int = 0
    _completed: int = 0
    aborted: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def next_ticket(self) -> tuple[Sample, bool, int] | None:
        """(sample, is warm-up, ticket number), or None once the level has issued all its requests."""
        with self._lock:
            total = None if self.count is None else self.warmup + self.count
            if self.aborted or (total is not None and self._issued >= total):
                return None
            index = self._issued
            self._issued += 1
        return self.samples[index % len(self.samples)], index < self.warmup, index

    def complete(self, record: RequestRecord) -> None:
        self.sink.write(record)
        with self._lock:
            self._completed += 1

    @property
    def completed(self) -> int:
        return self._completed

    def finished(self) -> bool:
        return self.count is not None and self._completed >= self.warmup + self.count


def _lines_until(chunks: Iterator[bytes], deadline: float) -> Iterator[bytes]:
    """Non-empty lines of a byte stream, with a deadline on the whole answer (a lean splitter: CPU the
    client spends at high concurrency on a small machine is taken from the server under test)."""
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


class ChatCompletionsUser(User):
    wait_time = constant(0)

    def on_start(self) -> None:
        # Under Locust's CLI the plan is built by the init hook, which asks the server for its model; a
        # worker process can be told to spawn users before that answer is back.
        deadline = time.monotonic() + 30
        while getattr(self.environment, "plan", None) is None:
            if time.monotonic() > deadline:
                raise StopUser()
            gevent.sleep(0.05)
        # geventhttpclient (the client behind Locust's FastHttpUser) parses HTTP in C: at 64 streams on a
        # small machine a pure-Python client takes CPU from the server under test and reads chunks late.
        self.http = HTTPClient.from_url(
            URL(self.host), concurrency=1, network_timeout=self.environment.plan.timeout_s, connection_timeout=10.0
        )

    def on_stop(self) -> None:
        self.http.close()

    @task
    def chat(self) -> None:
        plan: LevelPlan = self.environment.plan
        ticket = plan.next_ticket()
        if ticket is None:
            raise StopUser()
        sample, warmup, index = ticket
        level = plan.level or (self.environment.runner.user_count if self.environment.runner else 1)
        body = chat_body(sample, plan.mode, plan.model, plan.max_tokens, plan.temperature)
        t_send = time.time()
        status, error, timed_out = None, None, False
        result = None
        response = None
        try:
            response = self.http.post(
                "/v1/chat/completions",
                body=json.dumps(body).encode(),
                headers={"Content-Type": "application/json", **plan.headers},
            )
            status = response.status_code
            if status != 200:
                error = f"HTTP {status}: {response.read().decode(errors='replace')[:300]}"
            else:
                lines = iter(lambda: response.readline(b"\n"), b"")
                result = consume_sse(_lines_until(lines, time.monotonic() + plan.timeout_s), time.time)
                error = result.error
        except TimeoutError:
            timed_out, error = True, f"no complete answer within {plan.timeout_s:.0f}s"
        except Exception as exc:  # noqa: BLE001 - any transport failure is an http_error verdict
            error = f"{type(exc).__name__}: {exc}"
        finally:
            if response is not None:
                response.release()
        text = result.text if result else ""
        finish = result.finish_reason if result else None
        check = validate(
            text,
            is_json=sample.is_json,
            schema=sample.schema if plan.mode is not Mode.TEXT else None,
            truth=sample.answer,
            status=status,
            finish_reason=finish,
            error=error,
            timed_out=timed_out,
        )
        record = RequestRecord(
            arm=plan.arm,
            level=level,
            scenario=sample.scenario,
            mode=plan.mode.value,
            request_id=f"{sample.scenario}.{plan.mode.value}.c{level}.r{plan.repeat}.{sample.seed}{'.warmup' if warmup else ''}"
            # Locust UI runs cycle through the samples, maybe in several worker processes: keep ids unique.
            + ("" if plan.count is not None else f".{_worker_tag(self.environment)}.{index}"),
            seed=sample.seed,
            repeat=plan.repeat,
            warmup=warmup,
            t_send=t_send,
            t_first_token=result.t_first_token if result else None,
            t_last_byte=result.t_last_byte if result else (time.time() if error else None),
            prompt_tokens=result.prompt_tokens if result else None,
            output_tokens=result.output_tokens if result else None,
            finish_reason=finish,
            status=status,
            error=error,
            output=text,
            verdict=check.verdict.value,
            detail=check.detail,
            field_accuracy=check.field_accuracy,
            exact_match=check.exact_match,
        )
        plan.complete(record)
        self.environment.events.request.fire(
            request_type="CHAT",
            name=f"{plan.arm} {sample.scenario}/{plan.mode.value}",
            response_time=(record.e2e_s or 0.0) * 1000.0,
            response_length=record.output_tokens or 0,
            exception=None if check.verdict is Verdict.VALID else RuntimeError(f"{check.verdict.value}: {check.detail[:120]}"),
            context={"verdict": check.verdict.value, "warmup": warmup},
        )


# --- Locust's own CLI / web UI, and its master/worker mode ----------------------------------------

RECORD_MESSAGE = "dspark_record"


def _worker_tag(environment) -> str:
    return str(getattr(environment.runner, "client_id", "local")).rsplit("_", 1)[-1][:12]


class ForwardingSink:
    """A worker's sink: each record goes to the master, which alone writes the run folder, so records
    from every worker (on this machine or another) land in one requests.jsonl, none lost or doubled."""

    def __init__(self, runner) -> None:
        self.runner = runner

    def write(self, record: RequestRecord) -> None:
        self.runner.send_message(RECORD_MESSAGE, asdict(record))

    def close(self) -> None:
        pass


@events.init_command_line_parser.add_listener
def _add_arguments(parser) -> None:
    group = parser.add_argument_group("DSpark JSON benchmark")
    group.add_argument("--scenario", default="order_extraction", help="scenario name or YAML path")
    group.add_argument("--mode", default="json_object", choices=[m.value for m in Mode], help="how JSON is asked for")
    group.add_argument("--arm", default="ui", help="label for the records (e.g. baseline, dspark)")
    group.add_argument("--served-model", default="", help="model name for requests (default: the server's first)")
    group.add_argument("--max-tokens", type=int, default=512)
    group.add_argument("--request-timeout", type=float, default=120.0)
    group.add_argument("--run-dir", default="runs/locust-ui", help="where requests.jsonl and responses/ go")


@events.init.add_listener
def _plan_from_cli(environment, **_kwargs) -> None:
    options = environment.parsed_options
    if getattr(environment, "plan", None) is not None or options is None or not hasattr(options, "scenario"):
        return  # the sweep sets its own plan
    scenario = load_scenario(options.scenario)
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        sink = ForwardingSink(runner)
    else:
        sink = RecordSink(Path(options.run_dir))
        if isinstance(runner, MasterRunner):
            runner.register_message(RECORD_MESSAGE, lambda msg, **_: sink.write(RequestRecord.from_dict(msg.data)))
    model = options.served_model or httpx.get(f"{environment.host}/v1/models", timeout=10).json()["data"][0]["id"]
    start, stop = scenario.splits[Split.EVAL]
    environment.plan = LevelPlan(
        arm=options.arm,
        level=0,
        mode=Mode(options.mode) if scenario.is_json else Mode.TEXT,
        model=model,
        samples=list(itertools.islice(scenario.samples(Split.EVAL, min(1000, stop - start)), 1000)),
        sink=sink,  # type: ignore[arg-type]
        count=None,
        max_tokens=options.max_tokens,
        timeout_s=options.request_timeout,
    )
