"""Arms that already run somewhere (``--url ARM=http://host:port``): nothing to start or stop."""

from __future__ import annotations

import os
from collections.abc import Sequence

import httpx

from dspark_bench.loadtests.deploy.base import DeployError, Endpoint, ServerSpec


class ExternalDeployer:
    """Arms that already run somewhere: ``{arm: base_url}``; the API key comes from an environment variable."""

    def __init__(self, urls: dict[str, str], api_key_env: str = "OPENAI_API_KEY", model: str | None = None) -> None:
        self.urls, self.api_key = urls, os.environ.get(api_key_env)
        self.model = model

    def start(self, spec: ServerSpec) -> Endpoint:
        if spec.arm not in self.urls:
            raise DeployError(f"arm '{spec.arm}' has no URL; give --url {spec.arm}=http://host:port")
        base = self.urls[spec.arm].rstrip("/").removesuffix("/v1")
        endpoint = Endpoint(spec.arm, base, self.model or spec.served_name, api_key=self.api_key)
        try:
            response = httpx.get(f"{base}/v1/models", headers=endpoint.headers(), timeout=10)
            response.raise_for_status()
            served = [m["id"] for m in response.json().get("data", [])]
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise DeployError(
                f"arm '{spec.arm}': {base} is unreachable ({exc}); check the URL and that the server runs"
            ) from None
        if self.model is None and served:
            endpoint.model = served[0]
        return endpoint

    def start_many(self, specs: Sequence[ServerSpec]) -> list[Endpoint]:
        return [self.start(spec) for spec in specs]

    def stop_all(self) -> None:  # nothing of ours to stop
        return None
