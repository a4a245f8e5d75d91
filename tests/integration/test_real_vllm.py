"""Real vLLM CPU servers with the shipped model: the scenarios answer, and a small paired sweep runs."""

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from dspark_bench.scenarios import Split, load_all

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("scenario", load_all(), ids=lambda s: s.name)
def test_shipped_model_answers_each_scenario(stock_server, scenario):
    sample = next(scenario.samples(Split.EVAL, 1))
    messages = sample.turn_request(0, sample.messages).messages if sample.turns else sample.messages  # a session: its first turn
    response = httpx.post(
        f"{stock_server.base_url}/v1/chat/completions",
        json={"model": stock_server.model, "messages": messages, "max_tokens": 512, "temperature": 0},
        timeout=120,
    )
    response.raise_for_status()
    choice = response.json()["choices"][0]
    text = choice["message"]["content"]
    assert choice["finish_reason"] == "stop"
    if scenario.is_json:
        json.loads(text)  # the JSON it was asked for in the prompt parses
    else:
        assert text.strip() and not text.lstrip().startswith("{")


def test_small_paired_sweep_of_two_arms(stock_server, tmp_path):
    # the two arms differ only in how they ask for JSON, so they share one server (local arms too:
    # test_deploy_errors); here the session's stock one, through the URLs (local deploys: test_cost_only)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dspark_bench",
            "bench",
            "--arms",
            "baseline,baseline-constrained",
            "--url",
            f"baseline={stock_server.base_url}",
            "--url",
            f"baseline-constrained={stock_server.base_url}",
            "--levels",
            "1,2",
            "--requests",
            "3",
            "--warmup",
            "1",
            "--out",
            str(tmp_path),
            "--name",
            "sweep",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    run = tmp_path / "sweep"
    results = json.loads((run / "results.json").read_text())
    assert results["complete"] is True
    assert set(results["arms"]) == {"baseline", "baseline-constrained"}  # every configured arm ran
    assert [(lv["level"], lv["arm"]) for lv in results["levels"]] == [
        (1, "baseline"),
        (1, "baseline-constrained"),
        (2, "baseline-constrained"),
        (2, "baseline"),
    ]
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    # at least 4 waves measured, whole waves sent with the warm-up: 1 user 4 + 1, 2 users 9 + 1 (5 waves of 2);
    # the rest are the 2-user levels' tails (the one user's while the other's last answer runs)
    assert sum(not r["tail"] for r in records) == 2 * (4 + 1) + 2 * (9 + 1)
    assert {r["level"] for r in records if r["tail"]} <= {2}
    assert {r["mode"] for r in records if r["arm"] == "baseline"} == {"prompt"}
    assert {r["mode"] for r in records if r["arm"] == "baseline-constrained"} == {"json_object"}
    assert all(r["output_tokens"] and r["t_first_token"] for r in records if not r["tail"])  # a tail may be cancelled
    for level in results["levels"]:
        assert level["metrics"]["requests"] == {1: 4, 2: 9}[level["level"]] and level["metrics"]["raw_tok_s"] > 0
        assert level["health"]["prefix_cache_reset"] is True  # test servers run in dev mode: emptied before each level
        assert "vllm:generation_tokens" in level["server"]  # /metrics scraped around the level
    # every answer of its two levels, warm-up and tails included
    assert len(list((run / "responses" / "baseline").glob("*.json"))) == sum(r["arm"] == "baseline" for r in records)
    assert sum(r["arm"] == "baseline" and not r["tail"] for r in records) == 5 + 10
    assert (run / "report.html").exists() and "eff tok/s" in out.stdout and "x ref" in out.stdout
    assert "over baseline-constrained's, paired by repeat" in out.stdout  # the summary names its reference arm
    full = (run / "summary.txt").read_text()  # every column, where the printed summary fits 120 columns
    assert "span s" in full and "wall s" in full  # what the throughputs are over, beside the wall time
    assert max(len(line) for line in out.stdout.splitlines() if line.lstrip().startswith("order_extraction ")) <= 120
    assert len((run / "levels.csv").read_text().splitlines()) == 1 + 4
    assert httpx.get(f"{stock_server.base_url}/health", timeout=10).status_code == 200  # a URL arm's server is left serving


def test_locustfile_runs_under_locusts_own_cli(stock_server, tmp_path):
    started = time.monotonic()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            "dspark_bench/loadtests/locustfile.py",
            "--headless",
            "-u",
            "2",
            "-r",
            "2",
            "--requests",
            "4",
            "-t",
            "150s",  # only a backstop: the swarm ends after its 4 answers, however fast this machine is
            "--host",
            stock_server.base_url,
            "--scenario",
            "tool_call",
            "--mode",
            "json_schema",
            "--arm",
            "cli",
            "--run-dir",
            str(tmp_path),
            "--only-summary",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode in (0, 1), out.stderr[-2000:]  # 1: Locust saw failures (invalid answers), still a run
    records = [r for r in map(json.loads, (tmp_path / "requests.jsonl").read_text().splitlines()) if not r["tail"]]
    assert len(records) == 4 and {r["arm"] for r in records} == {"cli"}
    assert len({r["request_id"] for r in records}) == 4
    assert time.monotonic() - started < 140  # ended by its count, not by the 150 s run time
    assert {r["mode"] for r in records} == {"json_schema"} and all(r["verdict"] != "http_error" for r in records)
    assert "CHAT" in out.stdout + out.stderr  # our requests in Locust's own statistics


def _locust(base_url, run_dir, *extra, timeout=180):
    command = [sys.executable, "-m", "locust", "-f", "dspark_bench/loadtests/locustfile.py", "--host", base_url]
    command += ["--scenario", "order_extraction", "--mode", "json_object", "--run-dir", str(run_dir), *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_two_local_workers_records_reach_the_master_once_each(stock_server, tmp_path):
    csv = tmp_path / "locust"
    process = _locust(
        stock_server.base_url, tmp_path, "--arm", "dist", "--headless", "--processes", "2", "-u", "4", "-r", "4",
        "--requests", "12", "-t", "150s", "--csv", str(csv), "--only-summary",
    )  # fmt: skip
    output, _ = process.communicate(timeout=180)
    assert process.returncode in (0, 1), output[-2000:]
    every = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    records = [r for r in every if not r["tail"]]  # the tails keep the load on while the last tickets run
    ids = [r["request_id"] for r in records]
    tickets: dict[str, set[int]] = {}
    for request_id in ids:
        worker, number = request_id.split(".")[-2:]
        tickets.setdefault(worker, set()).add(int(number))
    # nothing lost, nothing doubled: one record for each of the 12 tickets, and the swarm ended on the last
    assert len(ids) == len(set(ids)) == 12 and set().union(*tickets.values()) == set(range(12)), output[-2000:]
    assert len(tickets) == 2  # both workers' answers reached the master's folder
    # The master splits ticket numbers by users (4): each worker takes those whose number modulo 4 is one
    # of its own positions (loadtests.workers.ticket_slots); no position belongs to both.
    slots = [{n % 4 for n in numbers} for numbers in tickets.values()]
    assert not slots[0] & slots[1] and len(slots[0] | slots[1]) == 4, slots
    with open(f"{csv}_stats.csv") as f:
        header = f.readline().strip().split(",")
        aggregated = [line.split(",") for line in f if ",Aggregated," in line][0]
    # Locust's own count holds the tails too, and never exceeds ours; it can trail it, down to 0 in a swarm
    # shorter than a worker's 3-s report interval: at quit Locust's master waits 0.5 s for the workers' last
    # reports, and on a busy 2-core machine they may come later
    assert int(aggregated[header.index("Request Count")]) <= len(every)
    assert len(list((tmp_path / "responses" / "dist").glob("*.json"))) == len(every)


def test_web_ui_shows_the_json_tab(stock_server, tmp_path):
    port = 18089
    process = _locust(
        stock_server.base_url, tmp_path, "--arm", "ui", "--web-host", "127.0.0.1", "--web-port", str(port),
        "--autostart", "-u", "2", "-r", "2", "-t", "60s",
    )  # fmt: skip
    try:
        rows = []
        for _ in range(60):
            try:
                stats = httpx.get(f"http://127.0.0.1:{port}/stats/requests", timeout=5).json()
                rows = next(t["data"] for t in stats.get("extended_stats", []) if t["key"] == "json-stats")
                if rows and rows[0]["requests"] >= 3:
                    break
            except (httpx.HTTPError, StopIteration, ValueError):
                pass
            subprocess.run(["sleep", "1"])
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=5).text
    finally:
        process.terminate()
        process.communicate(timeout=60)
    assert rows and rows[0]["requests"] >= 3 and rows[0]["valid"] >= 1 and rows[0]["effective_tok_s"] > 0
    assert "json-stats" in page  # the tab is declared in the page's template arguments


def test_a_users_dataset_runs_end_to_end_on_a_server_given_by_url(stock_server, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "dspark_bench", "bench", "--scenario", "examples/requests.jsonl",
         "--url", f"baseline-constrained={stock_server.base_url}", "--arms", "baseline-constrained", "--mode", "json_schema",
         "--levels", "2", "--requests", "8", "--warmup", "0", "--out", str(tmp_path), "--name", "dataset"],  # fmt: skip
        capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    run = tmp_path / "dataset"
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    records = [r for r in records if not r["tail"]]
    assert len(records) == 8 and all(r["scenario"] == "requests" and r["tags"] for r in records)
    # constrained: nothing fails to parse (a line's max_tokens may cut an answer: truncated, counted apart)
    assert all(r["verdict"] in ("valid", "schema_violation", "truncated") for r in records)
    assert any(r["verdict"] == "valid" for r in records)
    assert all((r["output_tokens"] or 0) <= 128 for r in records)  # each line's own max_tokens
    page = (run / "report.html").read_text()
    assert "By tag" in page and "invoice" in page


def _bench_by_url(stock_server, tmp_path: Path, name: str, *args: str) -> Path:
    """``dspark-bench bench`` against the session's stock server, as baseline-constrained; its run folder."""
    out = subprocess.run(
        [sys.executable, "-m", "dspark_bench", "bench", "--url", f"baseline-constrained={stock_server.base_url}",
         "--arms", "baseline-constrained", "--out", str(tmp_path), "--name", name, *args],  # fmt: skip
        capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    (tmp_path / name / "stdout.txt").write_text(out.stdout)
    return tmp_path / name


def test_agent_sessions_send_each_turn_with_the_conversation_so_far_and_reuse_its_prefix(stock_server, tmp_path):
    run = _bench_by_url(stock_server, tmp_path, "sessions", "--scenario", "agent_sessions", "--mode", "json_schema",
                        "--levels", "2", "--requests", "4", "--warmup", "0")  # fmt: skip
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    records = [r for r in records if not r["tail"]]
    sessions: dict[str, list[dict]] = {}
    for record in records:
        sessions.setdefault(record["session"], []).append(record)
    assert len(sessions) == 8  # 2 users x 4 waves: the level's requests are sessions
    for turns in sessions.values():
        turns.sort(key=lambda r: r["turn"])
        assert [r["turn"] for r in turns] == list(range(len(turns))) and turns[0]["turns"] in (2, 3)
        assert all(r["verdict"] == "valid" for r in turns[:-1])  # a session goes on only after a valid answer
        assert len(turns) == turns[0]["turns"] or turns[-1]["verdict"] != "valid"
        prompts = [r["prompt_tokens"] for r in turns]
        assert prompts == sorted(prompts) and len(set(prompts)) == len(prompts)  # each turn extends the last
        # the server found the earlier turns in its prefix cache (vLLM's usage.prompt_tokens_details)
        assert all(r["cached_tokens"] and r["cached_tokens"] < r["prompt_tokens"] for r in turns[1:])
    summary = (run / "stdout.txt").read_text()
    assert "agent sessions" in summary and "succeeded" in summary and "turn 2" in summary


def test_a_trace_replays_at_its_own_times_on_a_real_server(stock_server, tmp_path):
    gaps_ms = [0, 300, 300, 1200, 150, 150, 150, 900, 300, 300]  # a burst, pauses
    at, rows = 0, []
    for index, gap in enumerate(gaps_ms):
        at += gap
        rows.append({"timestamp": at, "scenario": "order_extraction", "index": index})
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    run = _bench_by_url(stock_server, tmp_path, "replay", "--trace", str(trace), "--mode", "json_schema")
    records = sorted((json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()), key=lambda r: r["t_scheduled"])
    assert len(records) == len(rows) and all(r["verdict"] == "valid" for r in records)
    offsets = [r["t_scheduled"] - records[0]["t_scheduled"] for r in records]
    assert offsets == pytest.approx([row["timestamp"] / 1000 for row in rows], abs=1e-3)  # scheduled at the trace's times
    # ... and sent then, while the answers before were still streaming, not one after another's answer: a count of
    # events, not a lag bound (with two CPU-bound processes beside it the median send came 0.5 s late on 2 cores,
    # and answers took longer too). The 150-300 ms gaps are shorter than an answer here: one at a time, none
    # would overlap (as with --max-concurrency 1)
    in_flight = [r for before, r in zip(records, records[1:], strict=False) if r["t_send"] < before["t_last_byte"]]
    assert len(in_flight) >= 3 and all(r["t_send"] >= r["t_scheduled"] for r in records), records
    [level] = json.loads((run / "results.json").read_text())["levels"]
    metrics = level["metrics"]
    # the level's rates are the records' own: the trace's (n - 1) over its 3.75 s as scheduled, and over the first
    # due time to the last send as achieved; a rate bound here would be one on the machine's speed (one send 0.66 s
    # late reads 2.04/s against 2.4/s), as it was on a 2-core CI machine
    sends = [r["t_send"] for r in records]
    assert metrics["scheduled_rate"] == pytest.approx((len(rows) - 1) / (rows[-1]["timestamp"] / 1000), rel=1e-3)
    assert metrics["achieved_rate"] == pytest.approx((len(records) - 1) / (max(sends) - records[0]["t_scheduled"]), rel=1e-6)


def test_a_run_whose_answers_are_cut_says_so_beside_its_speed_up(stock_server, tmp_path):
    """Answers cut at max_tokens measure how fast a model repeats, not how fast it serves: the summary, the
    level's health and the report's verdict say so (two arms on the one server, every answer cut at 12 tokens)."""
    url = stock_server.base_url
    out = subprocess.run(
        [sys.executable, "-m", "dspark_bench", "bench", "--url", f"baseline={url}", "--url", f"baseline-constrained={url}",
         "--arms", "baseline,baseline-constrained", "--levels", "1", "--requests", "3", "--warmup", "0",
         "--max-tokens", "12", "--out", str(tmp_path), "--name", "cut"],  # fmt: skip
        capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    run = tmp_path / "cut"
    levels = json.loads((run / "results.json").read_text())["levels"]
    assert levels and all(level["metrics"]["rate_truncated"] == 1.0 for level in levels)
    said = [" ".join(level["health"]["warnings"]) for level in levels]
    assert all("cut at max_tokens: the model does not finish these answers" in warning for warning in said), said
    assert "warning: order_extraction at 1, baseline: 100% of the answers were cut at max_tokens" in out.stdout
    header, *rows = [line for line in out.stdout.splitlines() if line.lstrip().startswith(("scenario", "order_extraction"))]
    assert header.split()[-1] == "warn" and all(row.split()[-1] == "CUT" for row in rows)
    assert "Not a speed-up of served answers at 1:" in (run / "report.html").read_text()
