"""What DSpark's engine-core hooks cost a step under vLLM's asynchronous scheduling (a GPU's), measured on the CPU.

A real ``AsyncScheduler`` (vLLM's own, with its KV cache manager) holds ``--requests`` running requests; the engine
patch's hooks are installed as ``engine_plugin.install`` lists them for a server started with ``--drafter`` (the
GPU's dspark-ngram: ``ngram_gpu``); each step is scheduled before the output of the one before it is taken in, as
vLLM's ``step_with_batch_queue`` does; the simulated model lands the drafts of ``--landing`` of the requests. The
engine core's hook time per wrapped method is ``hooks.CLOCK``'s, the clock a server exports at ``/metrics``; the
same steps with vLLM's methods alone give the scheduler's own time a step, for scale. No model runs: this is the
engine core's host time, which on a GPU runs beside the forward pass and, once it is longer, decides the step.

    .venv/bin/python -m studies.hook_cost [--requests 256] [--steps 400] [--landing 0.0]
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

MODEL = Path(__file__).resolve().parents[1] / "models" / "tiny-json"
BLOCK = 16
NUMBERS = itertools.count()  # request ids never repeat within a process


def async_scheduler(requests: int, drafts: int, grammar: bool = False, model: Path = MODEL):
    """vLLM's ``AsyncScheduler`` for ``requests`` running requests, verifying up to ``drafts`` a step; ``grammar``:
    with the model's tokenizer, for structured requests."""
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    blocks = requests * 64
    config = VllmConfig(
        scheduler_config=SchedulerConfig(
            max_num_seqs=requests, max_num_batched_tokens=max(2048, requests * (drafts + 1)), max_model_len=1024, is_encoder_decoder=False
        ),
        model_config=ModelConfig(model=str(model), dtype="float32", seed=0, skip_tokenizer_init=not grammar),
        cache_config=CacheConfig(block_size=BLOCK, enable_prefix_caching=False),
        speculative_config=SpeculativeConfig(method="ngram", num_speculative_tokens=drafts, prompt_lookup_min=2, prompt_lookup_max=4),
    )
    # vLLM validates asynchronous scheduling against the drafter it would load; the scheduler is what is measured.
    config.scheduler_config.async_scheduling = True
    config.cache_config.num_gpu_blocks = blocks
    kv_cache = KVCacheConfig(
        num_blocks=blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32))],
    )
    return AsyncScheduler(vllm_config=config, kv_cache_config=kv_cache, structured_output_manager=StructuredOutputManager(config), block_size=BLOCK)


def run_steps(scheduler, requests: int, steps: int, landing: float, schema: dict | None = None, tokens: int = 600) -> float:
    """``requests`` requests (the first ``landing`` share of them land every draft), run ``steps`` overlapped
    steps, each finished request replaced by a new one; seconds per step of scheduling, taking outputs in and,
    with a JSON ``schema``, building the step's grammar bitmask (the engine core's deferred path: after the
    output of the step before), each request sampling a random token its grammar allows."""
    import numpy as np
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    hits = max(0, min(requests, round(landing * requests)))
    random = np.random.default_rng(0)

    def add() -> None:
        number = next(NUMBERS)
        request_id = f"{'hit' if number % requests < hits else 'miss'}-{number}"
        params = SamplingParams(max_tokens=tokens, ignore_eos=True)
        if schema is not None:
            params = SamplingParams(max_tokens=tokens, structured_outputs=StructuredOutputsParams(json=schema))
            params.structured_outputs._backend = "xgrammar"  # what vLLM's input processor sets
        request = Request(request_id, [10 + number % 50] * 8, params, None)
        scheduler.structured_output_manager.grammar_init(request)
        scheduler.add_request(request)

    for _ in range(requests - len(scheduler.requests)):
        add()

    vocab = scheduler.vllm_config.model_config.get_vocab_size()  # the bitmask's words run past it
    written: dict[str, list[int]] = {}  # request -> the tokens it writes in its next step, as its grammar allows

    def choose(bits: np.ndarray) -> int:
        choices = np.flatnonzero(np.unpackbits(bits.view(np.uint8), bitorder="little")[:vocab])
        return int(random.choice(choices)) if choices.size else 5

    def walk(request, count: int) -> list[int]:
        """``count`` tokens the request's grammar allows one after another (what a step whose drafts all land
        writes); the grammar is rolled back, for vLLM to accept them when the step is taken in."""
        import torch

        grammar, mask, tokens = request.structured_output_request.grammar, torch.zeros((1, (vocab + 31) // 32), dtype=torch.int32), []
        for _ in range(count):
            if grammar.is_terminated():
                break
            grammar.fill_bitmask(mask, 0)
            token = choose(mask[0].numpy())
            if not grammar.accept_tokens(request.request_id, [token]):
                break
            tokens.append(token)
        grammar.rollback(len(tokens))
        return tokens or [5]

    def sample(grammar_output, output) -> None:
        if grammar_output is None:
            return
        row = 0
        for request_id in grammar_output.structured_output_request_ids:
            drafts = len(output.scheduled_spec_decode_tokens.get(request_id, ()))
            if request_id.startswith("hit") and drafts:
                written[request_id] = walk(scheduler.requests[request_id], drafts + 1)
            else:
                written[request_id] = [choose(grammar_output.grammar_bitmask[row])]
            row += drafts + 1

    def processed(output) -> None:
        ids = list(output.num_scheduled_tokens)
        drafted = {r: len(output.scheduled_spec_decode_tokens.get(r, ())) if r.startswith("hit") else 0 for r in ids}
        sampled = [written.pop(r, None) or [5] * (drafted[r] + 1) for r in ids]
        index = {r: i for i, r in enumerate(ids)}
        before = len(scheduler.requests)
        scheduler.update_from_output(output, ModelRunnerOutput(req_ids=ids, req_id_to_index=index, sampled_token_ids=sampled))
        for _ in range(before - len(scheduler.requests)):
            add()

    in_flight = None
    start = time.perf_counter()
    for _ in range(steps):
        output = scheduler.schedule()
        if in_flight is not None:
            processed(in_flight)
        if schema is not None and output.total_num_scheduled_tokens:
            sample(scheduler.get_grammar_bitmask(output), output)
        in_flight = output
    return (time.perf_counter() - start) / steps


def measure(
    install: Callable[[], None] | None, requests: int, steps: int, drafts: int, landing: float, schema: dict | None
) -> tuple[float, dict[str, int]]:
    """Seconds a step and the hook clock's nanoseconds by counter, with ``install``'s hooks (None: vLLM's alone)."""
    from dspark_serve import engine_plugin
    from dspark_serve.hooks import CLOCK

    engine_plugin.uninstall()
    if install is not None:
        install()
        CLOCK.sink = None  # the clock keeps its nanoseconds here, for this study to read, not a server's counters
    scheduler = async_scheduler(requests, drafts, schema is not None)
    run_steps(scheduler, requests, steps // 4, landing, schema)  # warm: requests admitted, grammars compiled, first judgements made
    CLOCK.ns = dict.fromkeys(CLOCK.ns, 0)
    seconds = run_steps(scheduler, requests, steps, landing, schema)
    clock = dict(CLOCK.ns)
    engine_plugin.uninstall()
    return seconds, clock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=256, help="running requests (the batch; default 256)")
    parser.add_argument("--steps", type=int, default=400, help="steps measured, after a quarter as many to warm (default 400)")
    parser.add_argument("--drafts", type=int, default=5, help="vLLM's num_speculative_tokens (default 5, as the GPU's ngram_gpu)")
    parser.add_argument("--landing", type=float, default=0.0, help="share of requests whose drafts land (default 0: none)")
    parser.add_argument("--drafter", default="ngram_gpu", help="the drafter dspark-serve chose (default ngram_gpu, the GPU's dspark-ngram)")
    parser.add_argument("--scenario", help="a scenario's JSON schema for every request (json_schema, e.g. order_extraction); default: plain text")
    args = parser.parse_args(argv)
    schema = None
    if args.scenario:
        from dspark_bench.scenarios import Split, load_scenario

        response_format = next(load_scenario(args.scenario).samples(Split.EVAL, 1)).response_format("json_schema")
        schema = response_format["json_schema"]["schema"] if response_format else None

    from dspark_serve import engine_plugin
    from dspark_serve.engine_config import EngineConfig

    with tempfile.TemporaryDirectory() as state_dir:
        config = EngineConfig(drafter=args.drafter, state_dir=state_dir)
        stock, _ = measure(None, args.requests, args.steps, args.drafts, args.landing, schema)
        patched, clock = measure(lambda: engine_plugin.install(config), args.requests, args.steps, args.drafts, args.landing, schema)
    what = f"{args.scenario}'s schema" if schema else "plain text"
    print(f"{args.requests} requests of {what}, {args.steps} steps, {args.landing:.0%} landing, drafter {args.drafter}, asynchronous scheduling")
    print(f"vLLM's scheduler alone: {stock * 1e6:9.0f} us a step")
    print(f"with DSpark's hooks:    {patched * 1e6:9.0f} us a step ({patched / stock:.2f}x)")
    for counter, ns in sorted(clock.items(), key=lambda item: -item[1]):
        if ns and not counter.startswith("worker"):
            print(f"  {counter:60s} {ns / args.steps / 1e3:9.1f} us a step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
