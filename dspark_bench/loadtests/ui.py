"""``dspark-bench ui`` (``make ui``): one arm under Locust's own web UI.

Deploys the arm (or uses ``--url``), starts Locust's web UI on localhost with our locustfile (users
and spawn rate are set in the browser), and, when the UI is closed with Ctrl-C, stops the server and
turns the records into the same results.json and HTML report as a sweep. ``--workers N`` runs Locust's
master with N local worker processes (``--processes``); every worker's records reach the master's run
folder. Across machines, start workers yourself with
``locust -f dspark_bench/loadtests/locustfile.py --worker --master-host HOST`` (see docs/distributed.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from dspark_bench.loadtests.config import ConfigError, RunConfig, settings
from dspark_bench.loadtests.deploy.local import die_with_parent
from dspark_bench.loadtests.deploy.servers import make_deployer, server_specs
from dspark_bench.loadtests.openai_api import locust_argv
from dspark_bench.loadtests.results import arm_facts

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
API_KEY_ENV = "DSPARK_BENCH_API_KEY"  # how the arm's API key (URL or GPUStack arms) reaches Locust's processes


def ui_problem(config: RunConfig) -> str | None:
    """Why ``config`` cannot drive one web-UI session, or None."""
    if len(config.scenarios) > 1:
        return f"setting 'scenarios': the web UI serves one scenario, not {len(config.scenarios)}; fix: give --scenario NAME"
    if len(config.rates) > 1:
        return f"setting 'rates': the web UI sends at one rate, not {len(config.rates)}; fix: give --rate R (or none: closed loop)"
    return None


def ignored_by_ui(config: RunConfig) -> list[str]:
    """The settings ``config`` gives that mean nothing under the web UI (users and spawn rate are set in the
    browser); ``arms`` is ``--arm``'s."""
    defaults = RunConfig()
    return [
        name
        for name, spec in settings().items()
        if not spec.ui and name != "arms" and getattr(config, name) != getattr(defaults, name)
    ]


def locust_command(config: RunConfig, arm: str, base_url: str, model: str, run_dir: Path, web_port: int) -> list[str]:
    """Locust's command line for one web-UI session on ``arm``: every setting of ``config`` the UI honours."""
    scenario = config.scenarios[0]
    request = config.request_settings(arm, model, {})  # the key travels in API_KEY_ENV, never on a command line
    rate = config.rates[0] if config.rates else 0.0
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--host", base_url, "--web-host", "127.0.0.1"]
    command += ["--web-port", str(web_port), "--scenario", scenario, "--mode", request.mode.value, "--arm", arm]
    command += ["--served-model", request.model, *locust_argv(request), "--run-dir", str(run_dir)]
    command += ["--api-key-env", API_KEY_ENV, "--rate", str(rate), "--arrival", config.arrival]
    if config.workers > 0:
        command += ["--processes", str(config.workers)]
    return command


def ui_run_dir(config: RunConfig) -> Path:
    return Path(config.output_dir) / (config.run_name or datetime.now().strftime("ui-%Y%m%d-%H%M%S"))


def run_ui(config: RunConfig, arm: str, web_port: int = 8089) -> tuple[int, Path, dict[str, Any]]:
    """Serve ``arm`` and run Locust's web UI until it exits; (Locust's exit status, run folder, arm facts)."""
    if problem := ui_problem(config):
        raise ConfigError(problem)
    run_dir = ui_run_dir(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    arms: dict[str, Any] = {}
    status = 0
    deployer = make_deployer(config, run_dir)
    try:
        print(f"starting arm {arm} ...", flush=True)
        endpoint = deployer.start_many(server_specs(config, [arm]))[0]
        arms[arm] = arm_facts(config, endpoint)
        command = locust_command(config, arm, endpoint.base_url, endpoint.model, run_dir, web_port)
        print(f"Locust web UI: http://127.0.0.1:{web_port}  (the JSON tab has our figures; Ctrl-C here to finish)", flush=True)
        # the key travels in the environment, never on a command line
        process = subprocess.Popen(
            # die_with_parent: a web UI left behind would go on loading the server and the machine
            command, env={**os.environ, API_KEY_ENV: endpoint.api_key or ""}, preexec_fn=die_with_parent
        )
        try:
            status = process.wait()
        except (KeyboardInterrupt, SystemExit):
            # Ctrl-C (Locust got it too) or SIGTERM here: the way to end a web-UI session. Locust stops its
            # users and workers on SIGTERM; then the run is finished like any other.
            _stop_locust(process)
            status = 0
    finally:
        deployer.stop_all()
    return status, run_dir, arms


def _stop_locust(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if Locust has not let go within a minute: its web port must not stay bound."""
    for sig, wait_s in ((signal.SIGTERM, 60.0), (signal.SIGKILL, 10.0)):
        if process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
