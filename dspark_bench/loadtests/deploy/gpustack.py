"""Deploy the arms as models on a GPUStack 2.x cluster, through its REST API, and delete them afterwards.

One model per arm (``backend: vLLM``, the arm's flags as ``backend_parameters``), polled until every
instance is ``running``; ``error`` / ``unreachable`` fail at once with the instance log's tail, and a
timeout names the scheduler's reason (``state_message``, e.g. "No available workers"). Once running,
the instance log must show the engine's argv holding the arm's flags (the article's first
troubleshooting step). Load goes to the server's ``/v1/chat/completions``. The API key comes from an
environment variable and is only ever put in request headers. Models we created are deleted on normal
exit, on failure, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from dspark_bench.loadtests.deploy.base import DeployError, Endpoint, ExitGuard, ServerSpec, log_tail
from dspark_bench.loadtests.deploy.gpustack_spec import (
    GPUStackSettings,
    arm_flags,
    engine_rejected,
    flags_missing_from_log,
    model_body,
    model_name,
)

FAILED_STATES = {"error", "unreachable"}


class GPUStackClient:
    """The few REST calls the deployer needs; every failure becomes a DeployError with the server's reason."""

    def __init__(self, url: str, api_key: str, timeout_s: float = 30.0, transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout_s, transport=transport
        )

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise DeployError(
                f"GPUStack at {self.url} is unreachable ({exc}); check gpustack.url and that the server runs"
            ) from None
        if response.status_code == 401:
            raise DeployError(f"GPUStack at {self.url} refused the API key (401); create one under API Keys and export it")
        if response.status_code >= 400:
            try:
                reason = response.json().get("message") or response.text
            except ValueError:
                reason = response.text
            raise DeployError(f"GPUStack {method} {path} failed ({response.status_code}): {reason}")
        return response.json() if response.content else None

    def items(self, path: str, **params: Any) -> list[dict[str, Any]]:
        return self._call("GET", path, params={"perPage": 100, **params})["items"]

    def default_cluster_id(self) -> int:
        clusters = self.items("/v2/clusters")
        if not clusters:
            raise DeployError(f"GPUStack at {self.url} has no cluster; create one (Clusters page) or set gpustack.cluster_id")
        default = [c for c in clusters if c.get("is_default")] or clusters
        return int(default[0]["id"])

    def find_model(self, name: str) -> dict[str, Any] | None:
        return next((m for m in self.items("/v2/models", search=name) if m["name"] == name), None)

    def create_model(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", "/v2/models", json=body)

    def instances(self, model_id: int) -> list[dict[str, Any]]:
        return self.items("/v2/model-instances", model_id=model_id)

    def instance_log(self, instance_id: int, tail: int = 200) -> str:
        try:
            return self._call("GET", f"/v2/model-instances/{instance_id}/logs", params={"tail": tail}) or ""
        except DeployError as exc:  # e.g. 404 "Model instance not assigned to a worker"
            return f"(no log: {exc})"

    def delete_model(self, model_id: int) -> None:
        try:
            self._call("DELETE", f"/v2/models/{model_id}")
        except DeployError as exc:
            if "(404)" not in str(exc):
                raise

    def close(self) -> None:
        self._http.close()


class GPUStackDeployer:
    """Creates one GPUStack model per arm, waits for it, checks its argv; ``stop_all`` deletes them."""

    def __init__(
        self,
        settings: GPUStackSettings,
        log_dir: Path,
        say: Callable[[str], None] = lambda line: print(line, flush=True),
        transport: httpx.BaseTransport | None = None,  # tests: a scripted GPUStack
    ) -> None:
        api_key = os.environ.get(settings.api_key_env)
        if not api_key:
            raise DeployError(
                f"GPUStack needs an API key in ${settings.api_key_env}; create one in GPUStack (API Keys) and "
                f"export {settings.api_key_env}=..."
            )
        self.settings, self.log_dir, self.say = settings, log_dir, say
        self.client = GPUStackClient(settings.url, api_key, transport=transport)
        self._api_key = api_key
        self.created: dict[str, int] = {}  # arm -> model id
        self._lock = threading.Lock()
        self._guard = ExitGuard(self.stop_all)

    def create(self, spec: ServerSpec, cluster_id: int) -> list[str]:
        flags = arm_flags(self.settings, spec.arm, spec.common_args, spec.arm_args)
        name = model_name(self.settings, spec.arm)
        if self.client.find_model(name) is not None:
            raise DeployError(
                f"arm '{spec.arm}': a model named {name!r} already exists on {self.settings.url}; delete it, or set "
                "gpustack.name_prefix to keep both"
            )
        try:
            model = self.client.create_model(model_body(self.settings, spec.arm, flags, cluster_id))
        except DeployError as exc:
            raise DeployError(f"arm '{spec.arm}': {exc}; fix the gpustack settings (model, gpu_selector, cluster_id)") from None
        with self._lock:
            self.created[spec.arm] = int(model["id"])
        self.say(f"  {spec.arm}: GPUStack model {name!r} (id {model['id']}) created, backend_parameters {flags}")
        return flags

    def _fail_instance(self, arm: str, instance: dict[str, Any]) -> DeployError:
        log = self.client.instance_log(int(instance["id"]))
        return DeployError(
            f"arm '{arm}': GPUStack instance {instance.get('name')} is {instance['state']}: "
            f"{instance.get('state_message') or 'no reason given'}; instance log tail:\n{log_tail(log)}"
        )

    def wait_running(self, arm: str) -> list[dict[str, Any]]:
        model_id = self.created[arm]
        deadline = time.monotonic() + self.settings.ready_timeout_s
        last: list[dict[str, Any]] = []
        while True:
            last = self.client.instances(model_id)
            for instance in last:
                if instance.get("state") in FAILED_STATES:
                    raise self._fail_instance(arm, instance)
            running = [i for i in last if i.get("state") == "running"]
            if len(running) >= self.settings.replicas:
                return running
            if time.monotonic() >= deadline:
                break
            time.sleep(min(self.settings.poll_interval_s, max(0.0, deadline - time.monotonic())))
        states = "; ".join(f"{i.get('name')}: {i.get('state')} ({i.get('state_message') or 'no reason given'})" for i in last)
        raise DeployError(
            f"arm '{arm}': not running after {self.settings.ready_timeout_s:.0f}s on {self.settings.url}: "
            f"{states or 'no instance was created'}; fix: free or add GPU workers, or raise gpustack.ready_timeout_s"
        )

    def check_argv(self, arm: str, flags: list[str], instance: dict[str, Any]) -> str:
        log = self.client.instance_log(int(instance["id"]))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / f"{arm}.log").write_text(log, encoding="utf-8")
        rejected = engine_rejected(log)
        missing = flags_missing_from_log(log, flags)
        if rejected or missing:
            raise DeployError(
                f"arm '{arm}': the engine is not running with the arm's flags ({rejected or f'missing {missing}'}); "
                "the worker's vLLM image must carry the engine patch (gpustack.model_fields.<arm>.image_name) and "
                f"backend_parameters must reach it; instance log: {self.log_dir / f'{arm}.log'}"
            )
        return log

    def start_many(self, specs: Sequence[ServerSpec]) -> list[Endpoint]:
        cluster_id = self.settings.cluster_id or self.client.default_cluster_id()
        flags = {spec.arm: self.create(spec, cluster_id) for spec in specs}
        endpoints = []
        for spec in specs:
            self.say(f"  {spec.arm}: waiting for GPUStack to schedule and start it (up to {self.settings.ready_timeout_s:.0f}s)")
            running = self.wait_running(spec.arm)
            self.check_argv(spec.arm, flags[spec.arm], running[0])
            endpoints.append(
                Endpoint(
                    spec.arm,
                    self.settings.url,
                    model_name(self.settings, spec.arm),
                    argv=["gpustack:vLLM", *flags[spec.arm]],
                    log_path=self.log_dir / f"{spec.arm}.log",
                    api_key=self._api_key,
                )
            )
        return endpoints

    def start(self, spec: ServerSpec) -> Endpoint:
        return self.start_many([spec])[0]

    def stop_all(self) -> None:
        with self._lock:
            created, self.created = self.created, {}
        for arm, model_id in created.items():
            try:
                self.client.delete_model(model_id)
                self.say(f"  {arm}: GPUStack model {model_id} deleted")
            except DeployError as exc:
                self.say(f"  {arm}: could not delete GPUStack model {model_id} ({exc}); delete it by hand")
