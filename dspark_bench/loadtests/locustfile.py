"""Our user under Locust's own CLI and web UI, alone or as master and workers::

    locust -f dspark_bench/loadtests/locustfile.py --host http://127.0.0.1:8000 --scenario order_extraction \\
        --mode json_object --run-dir runs/ui

Only Locust's hooks live here: our command-line options, the plan built from them at init, and the
master/worker record forwarding. The user itself is ``loadtests.user``; the sweep drives it without
this file.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import httpx
from locust import events
from locust.runners import MasterRunner, WorkerRunner

from dspark_bench.loadtests import ui_stats  # noqa: F401 - registers the web UI's JSON tab and its worker reports
from dspark_bench.loadtests.openai_api import MAX_TOKENS, REQUEST_TIMEOUT_S
from dspark_bench.loadtests.plan import LevelPlan, PlanSlot
from dspark_bench.loadtests.records import RECORD_MESSAGE, ForwardingSink, RecordSink, RequestRecord, RunFolderSink
from dspark_bench.loadtests.user import ChatCompletionsUser
from dspark_bench.scenarios import Mode, Split, load_scenario

SLOT = PlanSlot()
JsonUser = ChatCompletionsUser.bound_to(SLOT, "JsonUser")


@events.init_command_line_parser.add_listener
def _add_arguments(parser) -> None:
    group = parser.add_argument_group("DSpark JSON benchmark")
    group.add_argument("--scenario", default="order_extraction", help="scenario name or YAML path")
    group.add_argument("--mode", default="json_object", choices=[m.value for m in Mode], help="how JSON is asked for")
    group.add_argument("--arm", default="ui", help="label for the records (e.g. baseline, dspark)")
    group.add_argument("--served-model", default="", help="model name for requests (default: the server's first)")
    group.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    group.add_argument("--request-timeout", type=float, default=REQUEST_TIMEOUT_S)
    group.add_argument("--run-dir", default="runs/locust-ui", help="where requests.jsonl and responses/ go")
    group.add_argument("--api-key-env", default="", help="environment variable holding the server's API key (bearer)")


@events.init.add_listener
def _plan_from_cli(environment, **_kwargs) -> None:
    options = environment.parsed_options
    if options is None or not hasattr(options, "scenario"):
        return
    scenario = load_scenario(options.scenario)
    runner = environment.runner
    sink: RecordSink
    if isinstance(runner, WorkerRunner):
        sink = ForwardingSink(runner)
    else:
        sink = RunFolderSink(Path(options.run_dir))
        if isinstance(runner, MasterRunner):
            runner.register_message(RECORD_MESSAGE, lambda msg, **_: sink.write(RequestRecord.from_dict(msg.data)))
    # Asking the server for its model yields to gevent: a worker may be told to spawn users meanwhile,
    # and they wait on the slot.
    api_key = os.environ.get(options.api_key_env) if options.api_key_env else None
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    model = options.served_model or httpx.get(f"{environment.host}/v1/models", headers=headers, timeout=10).json()["data"][0]["id"]
    start, stop = scenario.splits[Split.EVAL]
    SLOT.set(
        LevelPlan(
            arm=options.arm,
            level=0,
            mode=Mode(options.mode) if scenario.is_json else Mode.TEXT,
            model=model,
            samples=list(itertools.islice(scenario.samples(Split.EVAL, min(1000, stop - start)), 1000)),
            sink=sink,
            count=None,
            max_tokens=options.max_tokens,
            timeout_s=options.request_timeout,
            headers=headers,
        )
    )
