"""``python -m loadtests ui`` (``make ui``): one arm under Locust's own web UI.

Deploys the arm (or uses ``--url``), starts Locust's web UI on localhost with our locustfile (users
and spawn rate are set in the browser), and, when the UI is closed with Ctrl-C, stops the server and
turns the records into the same results.json and HTML report as a sweep. ``--workers N`` runs Locust's
master with N local worker processes (``--processes``); every worker's records reach the master's run
folder. Across machines, start workers yourself with
``locust -f loadtests/locustfile.py --worker --master-host HOST`` (see docs/distributed.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

from dspark_bench.loadtests.config import RunConfig
from dspark_bench.loadtests.deploy.local import ExternalDeployer, LocalDeployer
from dspark_bench.loadtests.metrics import level_metrics
from dspark_bench.loadtests.records import read_records
from dspark_bench.loadtests.sweep import machine_facts, server_specs

LOCUSTFILE = Path(__file__).with_name("locustfile.py")


def locust_command(
    config: RunConfig, arm: str, base_url: str, model: str, run_dir: Path, web_port: int, workers: int
) -> list[str]:
    scenario = config.scenarios[0]
    mode = config.arm_mode(config.arm(arm)).value
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--host", base_url, "--web-host", "127.0.0.1"]
    command += ["--web-port", str(web_port), "--scenario", scenario, "--mode", mode, "--arm", arm]
    command += ["--served-model", model, "--max-tokens", str(config.max_tokens), "--run-dir", str(run_dir)]
    if workers > 0:
        command += ["--processes", str(workers)]
    return command


def write_results_from_records(run_dir: Path, config: RunConfig, arms: dict[str, Any]) -> Path:
    """results.json for a Locust-driven run (web UI, master/worker): one 'level' per (arm, scenario,
    mode, user count) seen in the records."""
    groups = defaultdict(list)
    path = run_dir / "requests.jsonl"
    for record in read_records(path) if path.exists() else []:
        groups[(record.arm, record.scenario, record.mode, record.level)].append(record)
    levels = [
        {"arm": arm, "scenario": scenario, "mode": mode, "level": level, "repeat": 0, "metrics": level_metrics(rows).as_dict()}
        for (arm, scenario, mode, level), rows in sorted(groups.items())
    ]
    results = {
        "complete": True,
        "error": None,
        "started": run_dir.name,
        "config": asdict(config),
        "machine": machine_facts(),
        "arms": arms,
        "skipped_arms": {},
        "levels": levels,
        "source": "Locust web UI run (levels are the user counts each answer was recorded at)",
    }
    path = run_dir / "results.json"
    path.write_text(json.dumps(results, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
    return path


def run_ui(config: RunConfig, arm: str, web_port: int = 8089, workers: int = 0) -> tuple[int, Path, dict[str, Any]]:
    """Serve ``arm`` and run Locust's web UI until it exits; (Locust's exit status, run folder, arm facts)."""
    run_dir = Path(config.output_dir) / (config.run_name or datetime.now().strftime("ui-%Y%m%d-%H%M%S"))
    run_dir.mkdir(parents=True, exist_ok=True)
    deployer = (
        ExternalDeployer(config.urls, config.api_key_env, config.served_model_name)
        if config.urls
        else LocalDeployer(run_dir / "logs", config.startup_timeout_s)
    )
    arms: dict[str, Any] = {}
    status = 0
    try:
        print(f"starting arm {arm} ...", flush=True)
        endpoint = deployer.start_many(server_specs(config, [arm]))[0]
        arms[arm] = {"base_url": endpoint.base_url, "argv": endpoint.argv, "mode": config.arm_mode(config.arm(arm)).value}
        command = locust_command(config, arm, endpoint.base_url, endpoint.model, run_dir, web_port, workers)
        print(f"Locust web UI: http://127.0.0.1:{web_port}  (the JSON tab has our figures; Ctrl-C here to finish)", flush=True)
        process = subprocess.Popen(command)
        try:
            status = process.wait()
        except KeyboardInterrupt:
            process.wait(timeout=30)  # Locust got the same Ctrl-C and stops its users
            status = 0
    finally:
        deployer.stop_all()
    return status, run_dir, arms
