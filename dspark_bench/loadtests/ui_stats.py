"""JSON figures in Locust's web UI: a "JSON" tab beside Locust's own statistics.

Per request name (arm, scenario, mode): requests, valid, each invalid category, and effective JSON
tokens/s (output tokens of valid answers per second since the first answer). Counted from the
``request`` events the user fires (their ``context`` carries the verdict). In distributed runs each
worker sends its counts to the master with Locust's own worker reports, so the master's tab adds up
every worker's answers.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict

from locust import events

from dspark_bench.loadtests.metrics import per_second
from dspark_bench.loadtests.validate import Verdict

CATEGORIES = [v.value for v in Verdict]
TAB_KEY = "json-stats"


class JsonStats:
    def __init__(self) -> None:
        self.counts: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def add(self, name: str, verdict: str, tokens: int, now: float) -> None:
        row = self.counts[name]
        row["requests"] += 1
        row[verdict] += 1
        if verdict == Verdict.VALID.value:
            row["valid_tokens"] += tokens
        row["first"] = min(row.get("first") or now, now)
        row["last"] = max(row.get("last") or now, now)

    def merge(self, other: dict[str, dict[str, float]]) -> None:
        for name, theirs in other.items():
            row = self.counts[name]
            for key, value in theirs.items():
                if key == "first":
                    row[key] = min(row.get(key) or value, value)
                elif key == "last":
                    row[key] = max(row.get(key) or value, value)
                else:
                    row[key] += value

    def take(self) -> dict[str, dict[str, float]]:
        """The counts so far, emptied (what a worker sends with each report)."""
        taken = {name: dict(row) for name, row in self.counts.items()}
        self.counts.clear()
        return taken

    def rows(self) -> list[dict[str, object]]:
        out = []
        for name, row in sorted(self.counts.items()):
            span = (row.get("last") or 0) - (row.get("first") or 0)
            requests = int(row["requests"])
            out.append(
                {
                    "name": name,
                    "requests": requests,
                    **{c: int(row.get(c, 0)) for c in CATEGORIES},
                    "valid_pct": f"{100 * row.get('valid', 0) / requests:.1f}%" if requests else "-",
                    "effective_tok_s": round(per_second(row.get("valid_tokens", 0), span), 1) if requests > 1 else 0.0,
                }
            )
        return out


STATS = JsonStats()


@events.request.add_listener
def _on_request(name, response_length, context, **_kwargs) -> None:
    verdict = (context or {}).get("verdict")
    if verdict and not (context or {}).get("warmup"):
        STATS.add(name, verdict, response_length or 0, time.time())


@events.reset_stats.add_listener
def _on_reset() -> None:
    STATS.counts.clear()


@events.report_to_master.add_listener
def _send(client_id, data, **_kwargs) -> None:
    data["json_stats"] = STATS.take()


@events.worker_report.add_listener
def _receive(client_id, data, **_kwargs) -> None:
    STATS.merge(data.get("json_stats", {}))


@events.init.add_listener
def _extend_web_ui(environment, **_kwargs) -> None:
    if environment.web_ui is None:
        return
    from flask import request

    columns = [{"key": "name", "title": "Name"}, {"key": "requests", "title": "Requests"}]
    columns += [{"key": c, "title": c} for c in CATEGORIES]
    columns += [{"key": "valid_pct", "title": "Valid"}, {"key": "effective_tok_s", "title": "Effective JSON tok/s"}]
    environment.web_ui.template_args["extended_tabs"] = [{"title": "JSON", "key": TAB_KEY}]
    environment.web_ui.template_args["extended_tables"] = [{"key": TAB_KEY, "structure": columns}]

    @environment.web_ui.app.after_request
    def _add_json_stats(response):
        if request.path != "/stats/requests" or not response.is_json:
            return response
        payload = {**response.json, "extended_stats": [{"key": TAB_KEY, "data": STATS.rows()}]}
        response.set_data(json.dumps(payload))
        return response
