"""The HTML report in a real headless Chromium: it renders, logs no console error, fetches nothing.

The page is rendered by our code from the committed example run (real records from
``make bench-dspark``) with hostile model output added to the invalid answers: markup that would
fetch from a listener of ours and log a console error if it were not escaped. A full-page screenshot
is kept with the test output (``runs/test-output/``, or ``$DSPARK_TEST_OUTPUT``).
``make test`` installs Debian's chromium; Playwright drives it (no browser download).
"""

from __future__ import annotations

import gzip
import http.server
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from dspark_bench.loadtests.config import REPO_ROOT
from dspark_bench.loadtests.results import load_results
from dspark_bench.reports import render_html

pytestmark = pytest.mark.integration

CHROMIUM = os.environ.get("DSPARK_CHROMIUM", "/usr/bin/chromium")
EXAMPLE_RUN = REPO_ROOT / "benchmarks" / "dspark" / "order-200"
# The flags the environment notes give for a closed network: no background calls home.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class _Listener(http.server.ThreadingHTTPServer):
    """Counts every request that reaches it: an escaped page never sends one."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                listener.hits.append(self.path)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_args) -> None:
                return None

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture()
def listener():
    server = _Listener()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


def _hostile_records(port: int) -> list[dict]:
    leak = f"http://127.0.0.1:{port}"
    hostile = (
        f'<img src="{leak}/img.png" onerror="console.error(\'unescaped img\')">'
        f"<script>fetch('{leak}/script');console.error('unescaped script')</script>"
        f'<link rel="stylesheet" href="{leak}/style.css">{{"order_id":'
    )
    base = {"arm": "baseline", "level": 1, "scenario": "order_extraction", "mode": "prompt", "warmup": False,
            "t_send": 0.0, "t_first_token": 0.1, "t_last_byte": 1.0, "output_tokens": 10, "status": 200,
            "error": None, "verdict": "parse_error", "output": hostile}  # fmt: skip
    return [
        {**base, "request_id": f'hostile-{i}<iframe src="{leak}/iframe"></iframe>', "detail": f"<b onmouseover=x>{i}</b>"}
        for i in range(3)
    ]


def _render_example(run_dir: Path, port: int) -> Path:
    shutil.copy(EXAMPLE_RUN / "results.json", run_dir / "results.json")
    with gzip.open(EXAMPLE_RUN / "requests.jsonl.gz", "rt", encoding="utf-8") as src:
        real = src.read().splitlines()
    hostile = [json.dumps(r) for r in _hostile_records(port)]
    (run_dir / "requests.jsonl").write_text("\n".join(hostile + real) + "\n", encoding="utf-8")
    return render_html(load_results(run_dir), run_dir / "report.html")


def test_report_renders_in_headless_chromium_without_errors_or_requests(tmp_path, listener):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency: run make test")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: `make test` installs Debian's chromium (apt-get install chromium)")
    page_path = _render_example(tmp_path, listener.server_port)
    out_dir = Path(os.environ.get("DSPARK_TEST_OUTPUT", REPO_ROOT / "runs" / "test-output"))
    out_dir.mkdir(parents=True, exist_ok=True)

    console_errors: list[str] = []
    network: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda msg: msg.type == "error" and console_errors.append(msg.text))
            page.on("pageerror", lambda exc: console_errors.append(str(exc)))
            page.on("request", lambda req: req.url.split(":", 1)[0] not in {"file", "data"} and network.append(req.url))
            page.goto(page_path.as_uri(), wait_until="load")
            page.screenshot(path=str(out_dir / "report-chromium-top.png"))  # what a reviewer sees first
            # open every invalid-answer category, as a reviewer would
            for summary in page.locator("details > summary").all():
                summary.click()
            page.wait_for_timeout(500)
            page.screenshot(path=str(out_dir / "report-chromium.png"), full_page=True)

            assert page.title().startswith("JSON benchmark")
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280  # wide tables scroll inside
            headings = page.locator("h2").all_inner_texts()
            assert any(h.startswith("The article's table: order_extraction") for h in headings), headings
            assert "Invalid answers by category" in headings
            # the page answers at a glance: a verdict first, the grid, a latency CDF, in-flight over time,
            # the machine and its noise
            assert headings[0].startswith("Verdict against baseline-constrained"), headings
            verdicts = page.locator("ul.verdict li").all_inner_texts()
            assert any(v.startswith("order_extraction, dspark: ") and " at 1 user" in v for v in verdicts), verdicts
            for wanted in ("throughput and latency against load", "Latency distribution at load", "Requests in flight over time"):
                assert any(wanted in h for h in headings), (wanted, headings)
            assert "Machine and noise" in headings
            # every plot decoded (embedded PNG data), none broken
            sizes = page.eval_on_selector_all("img", "imgs => imgs.map(i => [i.complete, i.naturalWidth])")
            assert len(sizes) >= 4 and all(done and width > 0 for done, width in sizes), sizes
            # the hostile answer shows as text, and made no element of its own
            assert page.locator("script, iframe, link[rel=stylesheet]").count() == 0
            assert page.get_by_text("unescaped script").first.is_visible()
        finally:
            browser.close()

    assert console_errors == []
    assert network == [] and listener.hits == []
