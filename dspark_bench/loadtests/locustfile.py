"""Our user under Locust's own CLI and web UI, alone or as master and workers::

    locust -f dspark_bench/loadtests/locustfile.py --host http://127.0.0.1:8000 --scenario order_extraction \\
        --mode json_object --run-dir runs/ui

Only Locust's hooks live here: our command-line options (``--rate`` for an open loop, also in the web
UI's form), where records go (the master alone writes the run folder; workers forward theirs), and a
fresh plan at each swarm's start (the host may come from the web UI's form; without one the swarm
stops with one line saying so). With workers the master makes the plan and hands each worker its part
once they have their users (``loadtests.workers``, which the sweep's ``--workers`` uses too). The user
itself is ``loadtests.user``; the sweep drives it without this file.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import gevent
import httpx
from locust import events
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from dspark_bench.loadtests import ui_stats  # noqa: F401 - registers the web UI's JSON tab and its worker reports
from dspark_bench.loadtests.openai_api import add_locust_options, settings_from_locust_options
from dspark_bench.loadtests.plan import Arrivals, LevelPlan, PlanSlot
from dspark_bench.loadtests.records import RECORD_MESSAGE, ForwardingSink, RecordSink, RequestRecord, RunFolderSink
from dspark_bench.loadtests.user import ChatCompletionsUser
from dspark_bench.loadtests.workers import PLAN_MESSAGE, USER_CLASS, plan_from_message, send_plans
from dspark_bench.scenarios import Mode, Split, load_scenario

SLOT = PlanSlot()
JsonUser = ChatCompletionsUser.bound_to(SLOT, USER_CLASS)


@events.init_command_line_parser.add_listener
def _add_arguments(parser) -> None:
    group = parser.add_argument_group("DSpark JSON benchmark")
    group.add_argument("--scenario", default="order_extraction", help="scenario name or YAML path")
    group.add_argument("--mode", default="json_object", choices=[m.value for m in Mode], help="how JSON is asked for")
    group.add_argument("--arm", default="ui", help="label for the records (e.g. baseline, dspark)")
    group.add_argument("--served-model", default="", help="model name for requests (default: the server's first)")
    add_locust_options(group)  # --max-tokens, --temperature, --request-timeout: as RequestSettings has them
    group.add_argument("--run-dir", default="runs/locust-ui", help="where requests.jsonl and responses/ go")
    group.add_argument("--api-key-env", default="", help="environment variable holding the server's API key (bearer)")
    group.add_argument(
        "--rate", type=float, default=0.0, help="open loop: requests per second, whatever the answers do (0: closed loop, one request per user at a time)"
    )
    group.add_argument("--arrival", default="poisson", choices=["poisson", "constant"], help="open loop: arrival process")
    group.add_argument(
        "--requests",
        type=int,
        default=0,
        help="send this many requests, then end the swarm once their answers are in, as vllm bench's --num-prompts "
        "(0: until --run-time or until stopped)",
    )


@dataclass
class SwarmState:
    """This process's state for the swarms of one Locust Environment, kept on it (``environment.dspark``)."""

    sink: RecordSink  # where this process's records go
    pending: LevelPlan | None = None  # a master's: the swarm's plan, not yet sent to its workers


def swarm_state(environment: Environment) -> SwarmState:
    return environment.dspark  # type: ignore[attr-defined]  # set at init, below


@events.init.add_listener
def _sink_from_cli(environment, **_kwargs) -> None:
    options = environment.parsed_options
    if options is None or not hasattr(options, "scenario"):
        return
    load_scenario(options.scenario)  # a wrong name fails at start-up, with the known ones
    runner = environment.runner
    if isinstance(runner, WorkerRunner):  # its plan comes from the master (the sweep's, or Locust's CLI)
        sink = ForwardingSink(runner)
        environment.dspark = SwarmState(sink)

        def take_plan(msg, **_kw) -> None:
            SLOT.set(plan_from_message(msg.data, sink)) if msg.data else SLOT.clear()

        runner.register_message(PLAN_MESSAGE, take_plan)
        return
    folder = SwarmSink(RunFolderSink(Path(options.run_dir)), environment)
    environment.dspark = SwarmState(folder)
    if isinstance(runner, MasterRunner):

        def receive(msg, **_kw) -> None:  # Locust passes the message as msg=
            record = RequestRecord.from_dict(msg.data)
            if not options.rate:  # a closed loop's level is the master's user count, not a worker's share
                record.level = getattr(runner, "target_user_count", None) or runner.user_count or record.level
            folder.write(record)

        runner.register_message(RECORD_MESSAGE, receive)
        # spawning_complete names no Environment: this master's listener knows its own. Locust fires it a
        # second after the spawn jobs even where workers have not reported their users (a loaded machine), so
        # the plan waits for their reports in a greenlet of its own
        environment.events.spawning_complete.add_listener(lambda **_kw: gevent.spawn(_plan_to_workers, environment))


@events.test_start.add_listener
def _plan_from_cli(environment, **_kwargs) -> None:
    """Each swarm gets a fresh plan; the host may have been typed into the web UI's form just now."""
    options = environment.parsed_options
    if options is None or not hasattr(options, "scenario") or isinstance(environment.runner, WorkerRunner):
        return  # a worker takes its part of the master's plan
    if not environment.host:
        message = "no host to send requests to: give --host http://HOST:PORT, or fill in Host in the web UI"
        _fail_swarm(environment, message)
        return
    scenario = load_scenario(options.scenario)
    api_key = os.environ.get(options.api_key_env) if options.api_key_env else None
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        model = options.served_model or httpx.get(f"{environment.host}/v1/models", headers=headers, timeout=10).json()["data"][0]["id"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        message = f"{environment.host}/v1/models did not name a model ({type(exc).__name__}: {exc}); check the host, or give --served-model"
        _fail_swarm(environment, message)
        return
    if options.requests < 0:
        _fail_swarm(environment, f"--requests {options.requests}: give a number of requests, or 0 to run until stopped")
        return
    start, stop = scenario.splits[Split.EVAL]
    mode = Mode(options.mode) if scenario.is_json else Mode.TEXT
    plan = LevelPlan(
        arm=options.arm,
        level=options.rate or 0,
        request=settings_from_locust_options(options, model, mode, headers),
        samples=list(scenario.samples(Split.EVAL, min(1000, stop - start))),
        sink=swarm_state(environment).sink,
        count=options.requests or None,
        arrivals=Arrivals(options.rate, options.arrival == "poisson") if options.rate else None,
        sample_source=(options.scenario, 0),
        ticket_ids=True,
    )
    state = swarm_state(environment)
    if isinstance(state.sink, SwarmSink):
        state.sink.expect(plan.total)
    if isinstance(environment.runner, MasterRunner):
        state.pending = plan  # sent once the workers have their users (spawning_complete)
    else:
        SLOT.set(plan)


def _plan_to_workers(environment: Environment, poll_s: float = 0.05) -> None:
    """Give each worker its part of the swarm's plan, once, when every worker has reported its users: the
    parts follow the users each reported, and a worker not yet counted would get no tickets (its users stop
    at once). Nothing is sent if the swarm stops first. A later change of users in the web UI keeps the
    plan: new users on a worker share its tickets."""
    state, runner = swarm_state(environment), environment.runner
    plan = state.pending
    if plan is None or not isinstance(runner, MasterRunner):
        return
    while runner.user_count != runner.target_user_count and state.pending is plan:
        gevent.sleep(poll_s)
    if state.pending is plan:
        send_plans(runner, plan)
        state.pending = None


@events.test_stop.add_listener
def _withdraw_plan(environment, **_kwargs) -> None:
    """Workers drop the stopped swarm's plan: users of the next swarm wait for the next one."""
    if isinstance(environment.runner, MasterRunner):
        swarm_state(environment).pending = None
        environment.runner.send_message(PLAN_MESSAGE, None)


class SwarmSink:
    """The run folder of this process (alone, or the master of workers), which ends the swarm once the
    records of all its requests are in (``--requests``): headless runs quit, the web UI stops the swarm."""

    def __init__(self, folder: RunFolderSink, environment: Environment) -> None:
        self.folder = folder
        self.environment = environment
        self.expected: int | None = None
        self.written = 0

    def expect(self, total: int | None) -> None:
        self.expected, self.written = total, 0

    def write(self, record: RequestRecord) -> None:
        self.folder.write(record)
        self.written += record.ends_ticket  # a request, or an agent session's last turn
        if self.expected is not None and self.written == self.expected:
            _end_swarm(self.environment)

    def close(self) -> None:
        self.folder.close()


def _fail_swarm(environment, message: str) -> None:
    """One line in the log (and the web UI's log tab), users that stop at once, a non-zero exit."""
    logging.error(message)
    environment.process_exit_code = 2
    SLOT.fail(message)
    _end_swarm(environment)


def _end_swarm(environment) -> None:
    """As Locust ends a swarm: a headless run quits, the web UI's swarm stops and the UI stays."""
    gevent.spawn(environment.runner.quit if environment.parsed_options.headless else environment.runner.stop)
