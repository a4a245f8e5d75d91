"""The paired sweep: every arm at level 1, then every arm at level 2, ... so drift hits all arms alike.

Each level runs Locust users (all spawned at once), in this process or on Locust workers
(``loadtests.workers``), until exactly N measured requests have completed. Arms that learn answers (the
oracle) are sent every prompt once before the sweep. Results are rewritten after every level, so a run that dies keeps what it
measured, marked incomplete.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import gevent
from locust.env import Environment

from dspark_bench.loadtests.capacity import CapacitySearch, Probe, probe_again
from dspark_bench.loadtests.config import RunConfig, parse_cpu_list, placement_line
from dspark_bench.loadtests.deploy.base import Deployer, DeployError, Endpoint, failure_summary
from dspark_bench.loadtests.deploy.local import LocalDeployer
from dspark_bench.loadtests.deploy.servers import make_deployer, server_specs, shared_servers
from dspark_bench.loadtests.machine import (
    GpuSampler,
    client_load,
    cpu_noise,
    cpu_snapshot,
    dtype_line,
    gpu_compute_processes,
    gpu_others,
    listening_pgid,
    starvation,
    wait_until_idle,
)
from dspark_bench.loadtests.metrics import FAILED, STALL_SHARE, LevelHealth, level_health, level_metrics
from dspark_bench.loadtests.model_shapes import ShapeError, parameters, shape_name, write_shaped_model
from dspark_bench.loadtests.openai_api import chat_client, send_chat
from dspark_bench.loadtests.plan import SILENT_AFTER, Arrivals, LevelPlan, PlanSlot, level_samples
from dspark_bench.loadtests.records import DiscardingSink, RunFolderSink
from dspark_bench.loadtests.results import LevelResult, RunResults, arm_facts
from dspark_bench.loadtests.server_metrics import delta, scrape
from dspark_bench.loadtests.user import ChatCompletionsUser
from dspark_bench.loadtests.workers import WorkerError, WorkerPool
from dspark_bench.scenarios import Scenario, Split, TraceScenario

STALLED_WARNING = 0.1  # share of streams read in one piece above which a level's timings are suspect
FAILED_LEVEL_SHARE = 0.5  # a level where more requests than this failed (HTTP error, timeout) stops the run


class _AllAtOnce(logging.Filter):
    """Drops Locust's warning about a very high spawn rate: a closed loop spawns all its users at once on
    purpose (no ramp-up), and the warning would fill the progress output once per level."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "spawn rate is very high" not in record.getMessage()


logging.getLogger("locust.runners").addFilter(_AllAtOnce())


class RunAborted(RuntimeError):
    """The run stopped early (server died, level timed out); partial results are on disk."""


def _progress(plan: LevelPlan, started: float, cost_only: bool = False) -> str:
    measured = [r for r in plan.records if not r.warmup]  # warm-up and tail requests (cancelled ones too) are not
    tokens = sum(r.output_tokens or 0 for r in measured)
    invalid = sum(1 for r in measured if r.verdict != "valid")
    unit = "sessions" if plan.samples and plan.samples[0].turns else "requests"  # agent sessions: a record per turn
    validity = "" if cost_only else f"  {invalid} not valid"  # dummy weights' answers: never valid, nothing to say
    return (
        f"  {plan.arm:<22} {_label(plan):<6} {plan.completed:>4}/{plan.total} {unit}  "
        f"{tokens / max(1e-9, time.time() - started):8.1f} tok/s{validity}"
    )


def _unstarved_reason(health: LevelHealth) -> str:
    """Why answers stalled when no measured process was starved: the server, where its waits were measured."""
    if health.api_server_wait_share is None:
        return "the load generator got its CPU (the server's waits are not measured: it runs elsewhere), so the server held its answers"
    return "no process of the level was starved of CPU: the server held its answers"


def _label(plan: LevelPlan) -> str:
    return f"r={plan.level:g}/s" if plan.arrivals else f"c={plan.level:g}"


def run_level(
    endpoint: Endpoint,
    plan: LevelPlan,
    timeout_s: float,
    progress_every_s: float = 5.0,
    pool: WorkerPool | None = None,
    cost_only: bool = False,
) -> None:
    """Drive one arm at one level until the plan is done, with users in this process or on ``pool``'s
    Locust workers; raises RunAborted on trouble. ``cost_only``: progress lines leave validity out."""
    started = time.time()
    users = plan.user_count
    if pool is None:
        env = Environment(user_classes=[ChatCompletionsUser.bound_to(PlanSlot(plan))], host=endpoint.base_url)
        runner = env.create_local_runner()
        runner.start(users, spawn_rate=users * 1000)  # all users at once, no ramp-up
    else:
        try:
            pool.start(endpoint.base_url, plan)
        except WorkerError as exc:
            raise RunAborted(f"arm '{plan.arm}': level {_label(plan)}: {exc}") from None
    last_print = started
    try:
        while True:
            gevent.sleep(0.2)
            if pool is not None and (problem := pool.problem()):
                plan.aborted = "worker died"
                raise RunAborted(f"arm '{plan.arm}': level {_label(plan)}: {problem}")
            if not endpoint.alive():
                plan.aborted = "server died"
                raise RunAborted(
                    f"arm '{plan.arm}': server died during level {_label(plan)}: {failure_summary(endpoint.log_path, latest=True)}"
                )
            if plan.silent_streak() >= max(SILENT_AFTER, users) and not endpoint.answers():
                plan.aborted = "server stopped answering"
                raise RunAborted(
                    f"arm '{plan.arm}': the server at {endpoint.base_url} stopped answering during level {_label(plan)} "
                    f"({plan.records[-1].error}); fix: restart it and run again (the results so far are kept)"
                )
            if time.time() - started > timeout_s:
                plan.aborted = "level timeout"
                raise RunAborted(
                    f"arm '{plan.arm}': level {_label(plan)} did not finish within {timeout_s:.0f}s "
                    "(raise level_timeout_s, or lower requests_per_level)"
                )
            if (pool or runner).user_count == 0 and not plan.finished() and time.time() - started > 5:
                # every user stopped without finishing: they could not even take tickets
                raise RunAborted(f"arm '{plan.arm}': all users stopped at {_label(plan)}")
            if plan.finished():
                break
            if time.time() - last_print >= progress_every_s:
                print(_progress(plan, started, cost_only), flush=True)
                last_print = time.time()
    finally:
        if pool is None:
            runner.quit()
            env.runner = None
        else:
            pool.stop()
    print(_progress(plan, started, cost_only) + "  done", flush=True)


def _measure_level(
    results: RunResults, endpoint: Endpoint, plan: LevelPlan, scenario: str, pool: WorkerPool | None, cache_reset: bool,
    stop_if_failing: bool = True,
) -> None:
    """Run one level and append its result (also when it stopped early, then marked incomplete). A level where
    most requests failed stops the run, unless ``stop_if_failing`` is off (a capacity probe: failing is its
    answer)."""
    config = results.config
    before = scrape(endpoint.base_url, endpoint.headers())
    harness = pool.pgids if pool else []
    mine = [pgid for arm, pgid in results.server_pgids.items() if arm == plan.arm]
    idle = sorted({pgid for arm, pgid in results.server_pgids.items() if arm != plan.arm} - set(mine))  # a shared server is mine
    wait_until_idle(idle)  # the arm before this one may still be finishing its own level
    snapshot = cpu_snapshot(mine, harness, idle)
    sampler = GpuSampler().start() if results.machine.gpu else None
    try:
        run_level(endpoint, plan, config.level_timeout_s, pool=pool, cost_only=config.cost_only)
    finally:
        after = cpu_snapshot(mine, harness, idle)
        gpu = sampler.stop() if sampler else None
        on_gpu = gpu_others(gpu_compute_processes(), {*results.server_pgids.values(), *harness, os.getpgid(0)}) if sampler else None
        metrics = level_metrics(plan.records, config.slo)
        # the load generator's own cost (this process and its workers): CPU seconds per request, and the
        # share of a core each of its load-sending processes used
        client = client_load(snapshot, after, len(plan.records), senders=pool.count if pool else 1)
        health = level_health(
            plan.level,
            metrics,
            client,
            cpu_noise(snapshot, after),
            plan.arrivals.rate if plan.arrivals is not None else None,
            incomplete=plan.aborted is not None or not plan.finished(),
            prefix_cache_reset=cache_reset,
            waits=starvation(snapshot, after),
            gpu=gpu,
            gpu_others=on_gpu,
            cost_only=config.cost_only,
        )
        server = delta(before, scrape(endpoint.base_url, endpoint.headers()))
        result = LevelResult(plan.arm, scenario, plan.request.mode.value, plan.level, plan.repeat, metrics, health, server)
        if health.problems:
            print(f"  warning: level {_label(plan)} of arm '{plan.arm}' is not a valid measurement: {'; '.join(health.problems)}", flush=True)
        for warning in health.warnings:
            print(f"  warning: level {_label(plan)} of arm '{plan.arm}': {warning}", flush=True)
        if metrics.stalled_stream_rate > STALLED_WARNING or health.starved:
            stalled = f"{metrics.stalled_stream_rate:.0%} of the answers arrived in one piece (first content after {STALL_SHARE:.0%} of the latency)"
            why = "; ".join(health.starved) or _unstarved_reason(health)
            print(f"  warning: level {_label(plan)} of arm '{plan.arm}': {stalled}; {why}", flush=True)
        results.levels.append(result)
        results.write()
    if stop_if_failing:
        _stop_if_failing(plan)


def _run_rounds(
    results: RunResults, arms: list[str], endpoints: dict[str, Endpoint], sink: RunFolderSink, pool: WorkerPool | None,
    unresettable: set[str],
) -> None:
    """Every level's repeats, as rounds: round r runs each level that has an r-th repeat of its own, then, with
    ``budget_minutes``, each level whose slowest round so far still fits before the budget ends. Repeats are
    the outer loop: a level's repeats fall at different times of the run, so slow drift of the machine shows
    in their spread (and in the intervals) instead of hiding between runs. Extra rounds depend on the time
    left, never on the figures measured, so stopping does not bias them.

    A round in which some arm's level was not a measurement (``LevelHealth.valid`` False: a pause, a starved
    load generator, other work on the CPU) earns that level one more round for every arm, up to ``remeasure``
    times (``RunConfig.remeasure_rounds``): its ratios pair only rounds in which every arm measured, so the level keeps
    the rounds it was asked for. The disturbed round stays in the results, marked not valid."""
    config = results.config
    deadline = time.monotonic() + 60 * config.budget_minutes if config.budget_minutes else None
    slowest: dict[tuple[str, int], float] = {}  # (scenario, level index) -> its slowest round, all arms
    remeasured: Counter[tuple[str, int]] = Counter()  # (scenario, level index) -> rounds added for a disturbed one
    most_remeasured = config.remeasure_rounds
    repeat = 0
    while True:
        ran = False
        for scenario_name in config.scenarios:
            scenario = config.scenario(scenario_name)
            for level_index, level in enumerate(config.rates or config.levels):
                key = (scenario_name, level_index)
                if repeat >= config.repeats_at(level) + remeasured[key]:
                    if deadline is None or time.monotonic() + slowest.get(key, float("inf")) > deadline:
                        continue
                    if not ran:
                        print(f"extra round {repeat + 1}: {(deadline - time.monotonic()) / 60:.1f} of {config.budget_minutes:g} minutes left", flush=True)
                ran = True
                started = time.monotonic()
                block = prompt_block(config, repeat, level_index)
                samples = level_samples(scenario, block)
                order = arms if (level_index + repeat) % 2 == 0 else arms[::-1]  # alternate who goes first
                first = len(results.levels)
                for arm_name in order:
                    endpoint = endpoints[arm_name]
                    # every arm starts the level with an empty prefix cache, emptied just before it: none
                    # gains from an earlier level's or the priming's prompts, nor from an arm that shares
                    # its server and sent the same prompts a moment ago
                    cache_reset = reset_prefix_caches({arm_name: endpoint}, unresettable)
                    plan = LevelPlan(
                        arm_name,
                        level,
                        config.request_settings(arm_name, endpoint.model, endpoint.headers(), scenario.is_json),
                        samples,
                        sink,
                        config.measured_requests(level),
                        warmup=config.warmup_requests,
                        repeat=repeat,
                        arrivals=_arrivals(config, scenario, level, seed=1000 * level_index + repeat),
                        users=config.max_concurrency if config.rates else None,
                        sample_source=(scenario_name, block[0]),
                    )
                    _measure_level(results, endpoint, plan, scenario.name, pool, cache_reset[arm_name])
                slowest[key] = max(slowest.get(key, 0.0), time.monotonic() - started)
                disturbed = [done.arm for done in results.levels[first:] if done.health.valid is False]
                if disturbed and remeasured[key] < most_remeasured:
                    remeasured[key] += 1
                    print(f"  level {_label(plan)} of round {repeat + 1} was not a measurement for {', '.join(disturbed)}: "
                          f"one more round of it for every arm ({remeasured[key]} of remeasure {most_remeasured})", flush=True)  # fmt: skip
        if not ran:
            return
        repeat += 1


def _find_capacity(
    results: RunResults, endpoints: dict[str, Endpoint], sink: RunFolderSink, pool: WorkerPool | None, unresettable: set[str]
) -> None:
    """Each arm's capacity at the SLO (``loadtests.capacity``), one open-loop probe at a time: the i-th probe
    of every arm sends the same fresh prompts, from an emptied prefix cache; a probe that was not a
    measurement (it did not hold its rate: ``LevelHealth.load_problems``), or that missed the SLO beside other
    work (``capacity.probe_again``), is run once more, with new prompts; one whose load still did not hold ends
    the search."""
    config = results.config
    for scenario_name in config.scenarios:
        scenario = config.scenario(scenario_name)
        for arm_name, endpoint in endpoints.items():
            search = CapacitySearch(config.rates[0] if config.rates else 1.0, config.capacity_share, config.capacity_resolution)
            index = len(results.capacity)
            results.capacity.append(search.result(arm_name, scenario.name, config.slo))
            levels = 0
            while (rate := search.next_rate()) is not None:
                for attempt in range(2):
                    level = _probe(results, endpoint, scenario, scenario_name, round(rate, 4), levels, sink, pool, unresettable)
                    levels += 1
                    metrics, problems, noise = level.metrics, level.health.load_problems, level.health.noise
                    good_share = metrics.good_requests / metrics.requests if metrics.requests else 0.0
                    passed = not problems and good_share >= search.share
                    if attempt or not probe_again(problems, noise, passed):  # a second miss beside noise is a miss
                        break
                    print(f"  capacity search, arm '{arm_name}': the probe at {level.level:g} req/s runs once more "
                          f"({'; '.join(problems or noise)})", flush=True)  # fmt: skip
                search.probes.append(Probe(level.level, good_share, passed, not problems, problems))
                if problems:
                    search.stopped = f"the probe at {level.level:g}/s was not a measurement twice: {'; '.join(problems)}"
                verdict = "holds the SLO" if passed else ("not a measurement" if problems else "misses the SLO")
                print(f"  capacity search, arm '{arm_name}': {level.level:g} req/s, {good_share:.0%} good: {verdict}", flush=True)
                results.capacity[index] = search.result(arm_name, scenario.name, config.slo)
                results.write()
            found = f"{search.capacity:g} req/s" if search.capacity is not None else f"not found ({search.stopped or 'no probe held the SLO'})"
            print(f"  capacity of arm '{arm_name}' at the SLO: {found}", flush=True)
        results.write()


def _probe(
    results: RunResults,
    endpoint: Endpoint,
    scenario: Scenario,
    scenario_name: str,
    rate: float,
    index: int,
    sink: RunFolderSink,
    pool: WorkerPool | None,
    unresettable: set[str],
) -> LevelResult:
    """One capacity probe: an open-loop level at ``rate`` with the ``index``-th block of fresh prompts."""
    config = results.config
    size = config.warmup_requests + config.requests_per_level
    block = (index * size, size)
    cache_reset = reset_prefix_caches({endpoint.arm: endpoint}, unresettable)[endpoint.arm]
    plan = LevelPlan(
        endpoint.arm,
        rate,
        config.request_settings(endpoint.arm, endpoint.model, endpoint.headers(), scenario.is_json),
        level_samples(scenario, block),
        sink,
        config.requests_per_level,
        warmup=config.warmup_requests,
        repeat=index,
        arrivals=Arrivals(rate, config.arrival == "poisson", seed=index),
        users=config.max_concurrency,
        sample_source=(scenario_name, block[0]),
    )
    _measure_level(results, endpoint, plan, scenario.name, pool, cache_reset, stop_if_failing=False)  # a probe that fails misses
    return results.levels[-1]


def _stop_if_failing(plan: LevelPlan) -> None:
    """More than half of a level's measured requests failed: the numbers would describe errors, not the server."""
    measured = [r for r in plan.records if not r.warmup]
    failed = [r for r in measured if r.verdict in FAILED]
    if measured and len(failed) > FAILED_LEVEL_SHARE * len(measured):
        raise RunAborted(
            f"arm '{plan.arm}': {len(failed)} of {len(measured)} requests failed at {_label(plan)}; first: {failed[0].error}"
        )


def smoke_test(endpoint: Endpoint, config: RunConfig, arm: str) -> None:
    """One request of the run's first scenario, sent as the sweep will send it, before any load: a server
    that refuses it (a max_tokens above its context, a wrong model name, a missing key) stops the run
    with the server's own message instead of a sweep of errors."""
    scenario = config.scenario(config.scenarios[0])
    sample = next(scenario.samples(Split.TRAIN, 1))  # not a measured prompt: it would sit in the prefix cache
    if sample.turns:  # an agent session: its first turn
        sample = sample.turn_request(0, sample.messages)
    request = config.request_settings(arm, endpoint.model, endpoint.headers(), scenario.is_json)
    client = chat_client(endpoint.base_url, request)
    try:
        outcome = send_chat(client, request, sample)
    finally:
        client.close()
    if outcome.status is None:
        raise RunAborted(f"arm '{arm}': the first request failed ({outcome.error}); check the server")
    if outcome.status != 200:
        raise RunAborted(f"arm '{arm}': the server refused the first request ({outcome.error})")


PRIMING_USERS = 8


def prompt_block(config: RunConfig, repeat: int, level_index: int) -> tuple[int, int]:
    """(offset in the scenario's eval split, prompts) of one level in one repeat: every level of every repeat
    gets prompts of its own (warm-up and measured), the same for every arm, so that no repeat finds an
    earlier repeat's prompts in a prefix cache and the repeats are independent. Each repeat takes a span of
    every level's block whether or not the level runs in it (level_repeats, budget_minutes), so any number
    of repeats lays out alike. A trace replays its own requests in every repeat."""
    sizes = [config.level_prompts(level) for level in config.rates or config.levels]
    if config.trace is not None:
        return 0, sizes[level_index]  # a trace's requests are the trace, in its order
    return repeat * sum(sizes) + sum(sizes[:level_index]), sizes[level_index]


def prompt_blocks(config: RunConfig) -> dict[tuple[int, int], tuple[int, int]]:
    """(repeat, level index) -> ``prompt_block`` for every level's own repeats (the extra rounds of
    budget_minutes, which depend on the machine's speed, aside)."""
    return {
        (repeat, index): prompt_block(config, repeat, index)
        for repeat in range(config.most_repeats)
        for index, level in enumerate(config.rates or config.levels)
        if repeat < config.repeats_at(level)
    }


def _arrivals(config: RunConfig, scenario: Scenario, rate: float, seed: int) -> Arrivals | None:
    """When an open loop's requests are due: a trace's own times (scaled by ``trace_speed``), or ``rate`` by
    the configured process; None for a closed loop."""
    if not config.rates:
        return None
    if isinstance(scenario, TraceScenario) and config.trace is not None:
        return Arrivals(rate, poisson=False, schedule=tuple(at / config.trace_speed for at in scenario.offsets_s))
    return Arrivals(rate, config.arrival == "poisson", seed=seed)


def reused_prompts(config: RunConfig, scenario: Scenario) -> str | None:
    """Why some prompts of the run come round again (None when none does): a dataset with fewer lines than
    the run sends."""
    if config.trace is not None:
        return None  # every repeat replays the trace's own requests, the prefix caches emptied before each
    needed = max(offset + size for offset, size in prompt_blocks(config).values())
    distinct = scenario.distinct_prompts
    if needed <= distinct:
        return None
    return (
        f"scenario '{scenario.name}' has {distinct} distinct prompts and the run sends {needed}: later levels and "
        "repeats reuse prompts (the prefix caches are reset before every level, so no arm starts a level warm)"
    )


def reset_prefix_caches(endpoints: dict[str, Endpoint], unresettable: set[str]) -> dict[str, bool]:
    """Empty every arm's prefix cache (vLLM's ``POST /reset_prefix_cache``, served in dev mode, which local
    arms run in); arm -> whether it was emptied. An arm whose server has no such endpoint is named once
    and added to ``unresettable``."""
    done = {}
    for name, endpoint in endpoints.items():
        if name in unresettable:
            done[name] = False
            continue
        done[name] = endpoint.reset_prefix_cache()
        if not done[name]:
            unresettable.add(name)
            print(
                f"note: arm '{name}': its prefix cache could not be reset (start its server with VLLM_SERVER_DEV_MODE=1 "
                "for /reset_prefix_cache); its levels may start with an earlier level's blocks cached",
                flush=True,
            )
    return done


def prime(endpoint: Endpoint, config: RunConfig, arm: str) -> None:
    """Send every prompt of the run to ``arm`` once, unmeasured, before the sweep (the oracle arm: its
    replay drafter then knows the answer to each). What this leaves in its prefix cache is dropped by the
    reset before every level (``reset_prefix_caches``)."""
    for scenario_name in config.scenarios:
        scenario = config.scenario(scenario_name)
        samples = [s for block in prompt_blocks(config).values() for s in level_samples(scenario, block)]
        print(f"priming arm '{arm}' with the run's {len(samples)} {scenario.name} prompts (unmeasured) ...", flush=True)
        request = config.request_settings(arm, endpoint.model, endpoint.headers(), scenario.is_json)
        plan = LevelPlan(arm, PRIMING_USERS, request, samples, DiscardingSink(), len(samples))
        run_level(endpoint, plan, config.level_timeout_s, progress_every_s=30.0)
        _stop_if_failing(plan)


def shaped_run(config: RunConfig, run_dir: Path) -> RunConfig:
    """A cost-only run's config: its servers serve the shape's folder, written into the run folder (the shape's
    config.json and ``config.model``'s tokenizer, no weights), under the shape's name. Other runs as given."""
    if config.model_shape is None:
        return config
    try:
        folder = write_shaped_model(config.model_shape, Path(config.model), run_dir / "model")
    except ShapeError as exc:
        raise RunAborted(str(exc)) from None
    print(f"cost-only: a {shape_name(config.model_shape)}-shaped model ({parameters(json.loads((folder / 'config.json').read_text())) / 1e9:.2f}B "
          "parameters) with vLLM's dummy weights; ratios over raw output tokens, validity not reported", flush=True)  # fmt: skip
    return replace(config, model=str(folder), served_model_name=config.served_model_name or shape_name(config.model_shape))


def run_sweep(config: RunConfig, run_dir: Path) -> RunResults:
    """Deploy the arms, run the interleaved sweep, write results after every level. Always stops servers."""
    run_dir.mkdir(parents=True, exist_ok=True)
    config = shaped_run(config, run_dir)
    results = RunResults(run_dir, config)
    sink = RunFolderSink(run_dir)
    arms = list(config.arms)
    deployer: Deployer | None = None
    pool: WorkerPool | None = None
    endpoints: dict[str, Endpoint] = {}
    unresettable: set[str] = set()  # arms whose server has no /reset_prefix_cache (said once)
    anywhere = os.sched_getaffinity(0) if config.client_cpus else None
    try:
        if config.client_cpus:  # the load generator's CPUs; Locust workers started below inherit them
            os.sched_setaffinity(0, parse_cpu_list(config.client_cpus))
        if placement := placement_line(config):
            print(placement, flush=True)
        deployer = make_deployer(config, run_dir)
        specs = server_specs(config, arms, results.machine)
        # local servers are shared by arms that would start the same one (each arm's levels start from an
        # emptied prefix cache, which local servers allow); servers at URLs or on a cluster are the user's
        local = isinstance(deployer, LocalDeployer)
        if local:
            print(dtype_line(config.dtype, results.machine), flush=True)
        starts, owner = shared_servers(specs) if local else (specs, {arm: arm for arm in arms})
        print(f"starting {len(arms)} arm(s): {', '.join(arms)} ...", flush=True)
        for arm, server_arm in owner.items():
            if arm != server_arm:
                print(f"  {arm}: shares the server of '{server_arm}' (the same settings)", flush=True)
        started = {endpoint.arm: endpoint for endpoint in deployer.start_many(starts)}
        for endpoint in (replace(started[owner[arm]], arm=arm) for arm in arms):
            endpoints[endpoint.arm] = endpoint
            results.arms[endpoint.arm] = arm_facts(config, endpoint)
            if endpoint.process is not None:
                results.server_pgids[endpoint.arm] = endpoint.process.pid  # each local server leads its own group
            elif (pgid := listening_pgid(endpoint.base_url)) is not None and pgid != os.getpgid(0):
                results.server_pgids[endpoint.arm] = pgid
                print(f"  {endpoint.arm}: its server runs on this machine (process group {pgid}): its CPU counts as the server's, not as noise", flush=True)
            print(f"  {endpoint.arm}: ready at {endpoint.base_url}", flush=True)
        results.write()
        for name, endpoint in endpoints.items():
            smoke_test(endpoint, config, name)
        for name, endpoint in endpoints.items():
            if config.arm(name).primed:
                prime(endpoint, config, name)
        if config.workers:
            print(f"starting {config.workers} Locust worker process(es) ...", flush=True)
            try:
                pool = WorkerPool(config.workers, run_dir / "logs")
            except WorkerError as exc:
                raise RunAborted(str(exc)) from None
        for scenario_name in config.scenarios:
            if reuse := reused_prompts(config, config.scenario(scenario_name)):
                print(f"note: {reuse}", flush=True)
        if config.find_capacity:
            _find_capacity(results, endpoints, sink, pool, unresettable)
        else:
            _run_rounds(results, arms, endpoints, sink, pool, unresettable)
        results.complete = True
    except (RunAborted, DeployError) as exc:
        results.error = str(exc).splitlines()[0]
        raise
    except KeyboardInterrupt:
        results.error = "interrupted (Ctrl-C)"
        raise
    except SystemExit as exc:  # SIGTERM or SIGHUP (deploy.base.ExitGuard)
        results.error = f"terminated by a signal (exit {exc.code})"
        raise
    finally:
        results.write()
        sink.close()
        if pool is not None:
            pool.close()
        if deployer is not None:
            deployer.stop_all()
        if anywhere is not None:
            os.sched_setaffinity(0, anywhere)
    return results
