import json
from pathlib import Path

import pytest

from dspark_serve import SUPPORTED_VLLM
from dspark_serve.flags import FlagError, parse
from dspark_serve.middleware import with_default_format
from dspark_serve.serve import (
    VersionError,
    build,
    load_aware_schedule,
    main,
    precompile_target,
    require_supported_vllm,
    select_drafter,
    status_line,
)

ARTICLE = ["--model", "m", "--dspark-enabled", "--response-format", "json", "--enable-prefix-caching"]

# The embedded model, found from this file: the engine patch's tests import nothing from the harness.
DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-json"


def test_article_flags_parse_and_the_rest_goes_to_vllm():
    options, rest = parse([*ARTICLE, "--dspark-speculative-length", "7", "--dtype", "bfloat16"])
    assert options.enabled and options.response_format == "json" and options.speculative_length == 7
    assert options.schema_compile and options.schema_dir is None
    assert rest == ["--model", "m", "--enable-prefix-caching", "--dtype", "bfloat16"]


@pytest.mark.parametrize("head", [["serve", "/models/m"], ["/models/m"]])
def test_vllm_serve_shape_from_gpustack_is_accepted(head):
    # GPUStack's vLLM backend launches `<entrypoint> MODEL_PATH --flags...`
    options, vllm_argv = parse([*head, "--dspark-enabled", "--enable-prefix-caching", "--port", "80"])
    assert options.enabled and vllm_argv == ["--model", "/models/m", "--enable-prefix-caching", "--port", "80"]


def test_defaults_and_equals_form(tmp_path):
    options, _ = parse(["--dspark-enabled", f"--dspark-schema-compile={tmp_path}", "--dspark-speculative-length=3"])
    assert options.speculative_length == 3 and options.schema_dir == tmp_path
    assert parse(["--dspark-enabled"])[0].speculative_length is None  # the drafter's longest, the gate measures


@pytest.mark.parametrize(
    ("argv", "enabled", "left"),
    [
        (["--dspark-enabled", "--port", "80"], True, ["--port", "80"]),
        (["--dspark-enabled", "false", "--port", "80"], False, ["--port", "80"]),
        (["--dspark-enabled=False"], False, []),
        (["--dspark-enabled", "true"], True, []),
        (["--dspark-enabled=on"], True, []),
        (["--no-dspark-enabled"], False, []),
        (["--dspark-enabled", "--dspark-enabled=0"], False, []),  # the last one given wins, as with argparse
    ],
)
def test_the_master_switch_takes_a_value_as_well(argv, enabled, left):
    """``--dspark-enabled false`` is off, not on with a stray ``false`` left for vLLM."""
    options, vllm_argv = parse(["--model", "m", *argv])
    assert options.enabled is enabled and vllm_argv == ["--model", "m", *left]


def test_a_master_switch_value_that_is_no_switch_word_is_refused():
    with pytest.raises(FlagError, match="--dspark-enabled='maybe' is not true or false; fix:"):
        parse(["--model", "m", "--dspark-enabled=maybe"])
    assert parse(["--dspark-enabled", "--no-dspark-schema-compile"])[0].schema_compile is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dspark-enabled", "--no-enable-prefix-caching"], "dspark requires prefix-caching"),
        (["--dspark-speculative-length", "0"], "out of range"),
        (["--dspark-speculative-length", "17"], "out of range"),
        (["--dspark-speculative-length", "five"], "not an integer"),
        (["--response-format", "xml"], "not supported"),
        (["--response-format"], "needs a value"),
        (["--dspark-schema-compile", "/no/such/dir"], "no such folder"),
    ],
)
def test_bad_flags_are_refused_with_the_fix(argv, message):
    with pytest.raises(FlagError, match=message) as info:
        parse(argv)
    assert "fix:" in str(info.value)


def test_launcher_exits_2_before_loading_anything(capsys):
    assert main(["--model", "m", "--dspark-enabled", "--no-enable-prefix-caching"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dspark requires prefix-caching" in err[0]


def test_unsupported_vllm_version_is_refused():
    require_supported_vllm(SUPPORTED_VLLM)
    require_supported_vllm(SUPPORTED_VLLM + "+cpu")
    with pytest.raises(VersionError, match="not supported"):
        require_supported_vllm("0.31.1")
    with pytest.raises(VersionError, match="not installed"):
        require_supported_vllm(None)


def test_native_dspark_selected_only_with_gpu_and_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["DeepseekV4ForCausalLM"], "dspark_config": {"k": 5}}))
    assert select_drafter(str(tmp_path), gpu=True).method == "dspark"
    assert select_drafter(str(tmp_path), gpu=False).method == "structure"
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    assert select_drafter(str(plain), gpu=True).method == "ngram_gpu"  # keeps asynchronous scheduling
    assert select_drafter(str(plain), gpu=True, choice="structure").method == "structure"
    assert select_drafter(str(plain), gpu=False).method == "structure"
    with pytest.raises(FlagError, match="needs a GPU"):
        select_drafter(str(plain), gpu=False, choice="native")


def test_draft_model_from_the_checkpoint_sidecar_or_the_flag(tmp_path):
    target, draft = tmp_path / "big", tmp_path / "big-draft"
    for folder in (target, draft):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    with pytest.raises(FlagError, match="needs a draft model"):
        select_drafter(str(target), gpu=False, choice="draft-model")
    assert select_drafter(str(target), gpu=False, draft_model=draft).draft_model == str(draft.resolve())
    (target / "dspark.json").write_text(json.dumps({"draft_model": "../big-draft"}))
    chosen = select_drafter(str(target), gpu=False)
    assert chosen.method == "draft_model" and chosen.draft_model == str(draft.resolve())
    # each mechanism can be switched off or chosen on its own
    assert select_drafter(str(target), gpu=False, choice="structure").method == "structure"
    assert select_drafter(str(target), gpu=False, choice="off").speculative_config(5) is None
    (target / "dspark.json").write_text(json.dumps({"draft_model": "../missing"}))
    with pytest.raises(FlagError, match="no model at"):
        select_drafter(str(target), gpu=False)


def test_a_block_drafter_is_served_with_vllms_dflash_at_its_trained_block(tmp_path):
    target, draft = tmp_path / "big", tmp_path / "big-dflash"
    for folder in (target, draft):
        folder.mkdir()
    (target / "config.json").write_text("{}")
    (draft / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"], "block_size": 13}))
    (target / "dspark.json").write_text(json.dumps({"draft_model": "../big-dflash"}))
    chosen = select_drafter(str(target), gpu=False)
    assert chosen.method == "dflash" and chosen.block == 13 and "one forward pass" in chosen.reason
    # The block is always drafted whole (12); the user's length (5) and the load cap how many are verified.
    spec = chosen.speculative_config(5, budget=1024)
    assert spec["method"] == "dflash" and spec["model"] == str(draft.resolve()) and spec["num_speculative_tokens"] == 12
    assert max(k for _, _, k in spec["num_speculative_tokens_per_batch_size"]) == 5
    assert chosen.speculative_config(20, budget=1024)["num_speculative_tokens_per_batch_size"][0][2] == 12
    # its context at p is the target's state at p: a cached block is whole, so a prefix hit keeps its last block
    assert spec["disable_eagle_block_drop"] is True
    pytest.importorskip("vllm")
    from vllm.config import SpeculativeConfig

    assert "disable_eagle_block_drop" in SpeculativeConfig.__dataclass_fields__  # the supported vLLM takes the key
    # the shipped model names the shipped block drafter
    assert select_drafter(str(DEFAULT_MODEL), gpu=False).method == "dflash"
    # a block drafter that does not state its block still is one, drafting the length asked for
    (draft / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"]}))
    unsized = select_drafter(str(target), gpu=False)
    assert unsized.method == "dflash" and unsized.speculative_config(5)["num_speculative_tokens"] == 5
    (draft / "config.json").write_text("{not json")
    with pytest.raises(FlagError, match="not JSON"):
        select_drafter(str(target), gpu=False)


def test_load_aware_schedule_drafts_less_as_batches_grow():
    schedule = load_aware_schedule(8)
    assert schedule[0][:1] == [1] and schedule[-1][1] == 1024
    lengths = [k for _, _, k in schedule]
    assert lengths[0] == 8 and lengths[-1] == 0 and lengths == sorted(lengths, reverse=True)
    assert all(a[1] + 1 == b[0] for a, b in zip(schedule, schedule[1:], strict=False))  # no gaps


def test_build_turns_the_switch_into_vllm_arguments():
    options, rest = parse([*ARTICLE, "--dspark-speculative-length", "6"])
    argv, facts = build(options, rest, gpu=False)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["method"] == "custom_class" and spec["model"] == "dspark_serve.drafter.JsonDrafter"
    assert spec["num_speculative_tokens"] == 6
    assert "--structured-outputs-config" not in argv  # see serve.build: xgrammar's fixed separators
    assert "dspark_serve.middleware.DSparkMiddleware" in argv
    line = status_line(facts)
    assert "drafter structure" in line and "up to 6 draft tokens" in line and "JSON (json_object)" in line
    # this checkout is installed (make install), so vLLM will load the engine plugin
    assert facts["engine_plugin"] and "grammar-forced tokens counted" in line and line.endswith("acceptance cap active")
    assert "NOT counted" in status_line({**facts, "engine_plugin": False})
    off_argv, off_facts = build(parse(["--model", "m"])[0], ["--model", "m"], gpu=False)
    assert off_argv == ["--model", "m"] and status_line(off_facts).startswith("DSpark: off")


def test_cpu_gets_blocks_small_enough_for_the_prefix_cache_unless_told():
    options, rest = parse(ARTICLE)
    argv, facts = build(options, rest, gpu=False)
    assert argv[argv.index("--block-size") + 1] == "32" and "(32-token blocks)" in status_line(facts)
    gpu_argv, gpu_facts = build(options, rest, gpu=True)
    assert "--block-size" not in gpu_argv and gpu_facts["block_size"] is None
    own_argv, own_facts = build(*parse([*ARTICLE, "--block-size", "128"]), gpu=False)
    assert own_argv.count("--block-size") == 1 and own_facts["block_size"] == 128


def test_default_response_format_only_when_absent():
    body = json.loads(with_default_format(b'{"messages": []}'))
    assert body["response_format"] == {"type": "json_object"}
    explicit = b'{"messages": [], "response_format": {"type": "text"}}'
    assert with_default_format(explicit) == explicit
    assert with_default_format(b"not json") == b"not json"


def test_default_format_leaves_tools_and_explicit_null_alone():
    tools = b'{"messages": [], "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}'
    assert with_default_format(tools) == tools
    null = b'{"messages": [], "response_format": null}'
    assert with_default_format(null) == null


@pytest.mark.parametrize(
    "spelling", ["--speculative-config={}", "--speculative_config", "--speculative-config.method=ngram", "-sc", "-sc={}"]
)
def test_every_spelling_of_speculative_config_is_refused(spelling):
    options, vllm_argv = parse([*ARTICLE, spelling, *([] if "=" in spelling else ["{}"])])
    with pytest.raises(FlagError, match="chooses the speculative config itself"):
        build(options, vllm_argv, gpu=False)


def test_precompile_reaches_the_server_where_it_listens_with_its_key():
    url, headers = precompile_target(["--host", "10.1.2.3", "--port", "9000", "--api-key", "k"], {})
    assert url == "http://10.1.2.3:9000" and headers == {"Authorization": "Bearer k"}
    url, headers = precompile_target(["--host=0.0.0.0"], {"VLLM_API_KEY": "e"})
    assert url == "http://127.0.0.1:8000" and headers == {"Authorization": "Bearer e"}
    assert precompile_target([], {}) == ("http://127.0.0.1:8000", {})


def test_schema_check_refuses_what_the_grammar_compiler_cannot_compile():
    pytest.importorskip("xgrammar")
    from pathlib import Path

    from dspark_serve.middleware import SchemaCheck, requested_schema

    check = SchemaCheck(str(Path(__file__).resolve().parents[2] / "models" / "tiny-json"))
    huge = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 10**30}}}
    assert "Integer exceeds maximum limit" in check.problem(huge)
    assert check.problem({"type": "object", "properties": {"n": {"type": "integer", "maximum": 10}}}) is None
    body = json.dumps({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": huge}}}).encode()
    assert requested_schema(body) == huge and requested_schema(b'{"response_format": {"type": "json_object"}}') is None


def test_the_verification_budget_is_a_wide_bound_the_measured_costs_decide_within_and_is_said():
    from dspark_serve.serve import verify_budget

    assert verify_budget({}) == (1024, "default: the measured step costs decide")  # no rule by CPU flag
    assert verify_budget({"DSPARK_VERIFY_BUDGET": "64"}) == (64, "DSPARK_VERIFY_BUDGET=64")
    with pytest.raises(FlagError, match="DSPARK_VERIFY_BUDGET"):
        verify_budget({"DSPARK_VERIFY_BUDGET": "lots"})
    options, rest = parse([*ARTICLE, "--dspark-draft-model", "models/tiny-json-draft"])  # vLLM's schedule
    for budget, drafts_at_64 in ((verify_budget({}), 5), (verify_budget({"DSPARK_VERIFY_BUDGET": "64"}), 0)):
        argv, facts = build(options, rest, gpu=False, budget=budget)
        schedule = json.loads(argv[argv.index("--speculative-config") + 1])["num_speculative_tokens_per_batch_size"]
        assert next(k for first, last, k in schedule if first <= 64 <= last) == drafts_at_64
        assert f"fewer past {budget[0]} verified positions per step ({budget[1]})" in status_line(facts)


HOPPER = (9, 0)


@pytest.mark.parametrize(
    ("extra", "capability", "tokens"),
    [
        ([], None, None),  # no GPU: no graphs
        ([], HOPPER, 512),  # vLLM 0.32's default largest graph
        ([], (10, 0), 1024),  # ... on a GPU of compute capability 10.x
        (["--max-cudagraph-capture-size", "256"], HOPPER, 256),
        (["-cc", '{"max_cudagraph_capture_size": 128}'], HOPPER, 128),
        (["--compilation-config", '{"cudagraph_capture_sizes": [1, 2, 4, 300]}'], HOPPER, 300),
        (["--compilation-config.max_cudagraph_capture_size=64"], HOPPER, 64),
        (["--enforce-eager"], HOPPER, None),
        (["-O0"], HOPPER, None),
        (["-cc", '{"cudagraph_mode": "NONE"}'], HOPPER, None),
    ],
)
def test_the_largest_step_a_cuda_graph_serves_is_read_from_vllms_own_settings(extra, capability, tokens):
    from dspark_serve.serve import cuda_graph_tokens

    assert cuda_graph_tokens(["--model", "m", *extra], capability) == tokens


def test_on_a_gpu_every_verification_step_fits_a_cuda_graph_unless_told_otherwise():
    # a step past vLLM's largest graph runs without graphs: the load-aware length keeps batch * (drafts + 1)
    # within it, so at 64 users ngram_gpu verifies 7 drafts a request (512 tokens), not 8 (576, no graph)
    from dspark_serve.serve import verify_budget

    budget = verify_budget({}, 512)
    assert budget == (512, "the largest step vLLM replays a CUDA graph for here (512 tokens); DSPARK_VERIFY_BUDGET sets another")
    assert verify_budget({"DSPARK_VERIFY_BUDGET": "1024"}, 512) == (1024, "DSPARK_VERIFY_BUDGET=1024")  # the user's wins
    options, rest = parse([*ARTICLE, "--dspark-drafter", "ngram"])
    argv, facts = build(options, rest, gpu=True, budget=budget)
    schedule = json.loads(argv[argv.index("--speculative-config") + 1])["num_speculative_tokens_per_batch_size"]
    assert next(k for first, last, k in schedule if first <= 64 <= last) == 7
    assert all(last * (k + 1) <= 512 for first, last, k in schedule if k > 0)
    assert "fewer past 512 verified positions per step (the largest step vLLM replays a CUDA graph for here" in status_line(facts)


def test_the_launcher_on_a_gpu_hands_vllm_the_schedule_that_fits_its_graphs(monkeypatch, capsys):
    import os
    import sys

    from dspark_serve import serve

    started: list[list[str]] = []
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != "DSPARK_VERIFY_BUDGET"})
    monkeypatch.setattr(sys, "argv", ["dspark-serve"])
    monkeypatch.setattr(serve, "_gpu_present", lambda: True)
    monkeypatch.setattr(serve, "_gpu_capability", lambda: HOPPER)
    monkeypatch.setattr(serve.runpy, "run_module", lambda *args, **kwargs: started.append(list(sys.argv)))
    assert main(["--model", "m", "--dspark-enabled", "--dspark-drafter", "ngram", "--enable-prefix-caching"]) == 0
    argv = started[0]
    schedule = json.loads(argv[argv.index("--speculative-config") + 1])["num_speculative_tokens_per_batch_size"]
    assert next(k for first, last, k in schedule if first <= 64 <= last) == 7
    assert argv[argv.index("--max-cudagraph-capture-size") + 1] == "1024"  # room for a prompt beside them
    assert "fewer past 512 verified positions per step" in capsys.readouterr().out


def test_on_a_gpu_graphs_reach_past_a_full_verification_step_by_room_for_a_prompt():
    # a step that verifies 512 positions and prefills a 130-token prompt ran without graphs on an H100
    # (benchmarks/gpu/h100-s57-lookahead): graphs are captured up to the budget plus a prompt's room
    from dspark_serve.serve import verify_budget

    budget = verify_budget({}, 512)
    options, rest = parse([*ARTICLE, "--dspark-drafter", "ngram"])
    argv, facts = build(options, rest, gpu=True, budget=budget, graph_tokens=512)
    assert argv[argv.index("--max-cudagraph-capture-size") + 1] == "1024" and facts["graph_ceiling"] == 1024
    assert "CUDA graphs up to 1024 tokens a step" in status_line(facts)
    wide = build(options, rest, gpu=True, budget=verify_budget({"DSPARK_VERIFY_BUDGET": "1024"}, 512), graph_tokens=512)[0]
    assert wide[wide.index("--max-cudagraph-capture-size") + 1] == "1536"
    for extra in (["--max-cudagraph-capture-size", "256"], ["-cc", '{"cudagraph_capture_sizes": [1, 8]}']):
        given, given_rest = parse([*ARTICLE, *extra])  # the user's range wins
        kept, kept_facts = build(given, given_rest, gpu=True, budget=budget, graph_tokens=256)
        assert kept.count("--max-cudagraph-capture-size") == given_rest.count("--max-cudagraph-capture-size")
        assert kept_facts["graph_ceiling"] is None and "CUDA graphs up to" not in status_line(kept_facts)
    off = build(*parse([*ARTICLE, "--dspark-drafter", "off"]), gpu=True, budget=budget, graph_tokens=512)[0]
    assert "--max-cudagraph-capture-size" not in off  # no verification steps: vLLM's own range
    assert "--max-cudagraph-capture-size" not in build(options, rest, gpu=False, budget=budget)[0]  # no graphs


def test_a_cpu_server_gets_a_kv_cache_size_unless_the_user_gave_one():
    from dspark_serve.serve import default_cpu_kv_cache

    assert default_cpu_kv_cache({}, ["--model", "m"], gpu=False) == "2"
    assert default_cpu_kv_cache({"VLLM_CPU_KVCACHE_SPACE": "8"}, ["--model", "m"], gpu=False) is None
    assert default_cpu_kv_cache({}, ["--kv-cache-memory-bytes", "1G"], gpu=False) is None
    assert default_cpu_kv_cache({}, ["--model", "m"], gpu=True) is None


def test_a_server_that_does_not_start_is_one_line_with_the_fix():
    from dspark_serve.serve import startup_failure

    memory = startup_failure(ValueError("Free memory on device cpu (3.1/23.5 GiB) is less than desired\nmore"))
    assert "\n" not in memory and "VLLM_CPU_KVCACHE_SPACE" in memory and memory.startswith("dspark-serve: error:")
    engine = startup_failure(RuntimeError("Engine core initialization failed. See root cause above."))
    assert "fix: the engine's own error is in the lines above" in engine


def test_the_status_says_whether_and_where_the_acceptance_cap_acts():
    """The cap acts on both of vLLM's scheduling paths, and the status says which: synchronous on a CPU, and
    on a GPU with --no-async-scheduling; asynchronous where vLLM schedules a block drafter so on a GPU; then
    the engine's own steps say which it was."""
    from dspark_serve.middleware import observed_cap

    draft_model = ["--dspark-draft-model", str(Path(__file__).resolve().parents[2] / "models" / "tiny-json-dflash")]
    options, rest = parse([*ARTICLE, *draft_model])
    assert build(options, rest, gpu=False)[1]["acceptance_cap"] == "active"
    on_gpu = build(options, rest, gpu=True)[1]["acceptance_cap"]
    assert on_gpu.startswith("active (asynchronous scheduling") and on_gpu in status_line(build(options, rest, gpu=True)[1])
    assert build(options, [*rest, "--no-async-scheduling"], gpu=True)[1]["acceptance_cap"] == "active"
    assert build(options, rest, gpu=False, environ={"DSPARK_ACCEPTANCE_CAP": "0"})[1]["acceptance_cap"].startswith("off")
    assert build(*parse([*ARTICLE, "--dspark-drafter", "off"]), gpu=True)[1]["acceptance_cap"].startswith("off")
    # what the engine's steps showed overrides what was expected
    assert observed_cap("active", {}) == "active"  # no step yet
    assert observed_cap("active", {"engine_steps": 10, "async_steps": 0}) == "active"
    assert observed_cap("active", {"engine_steps": 10, "async_steps": 10}).startswith("active (asynchronous scheduling, 10 of 10 steps")
    assert observed_cap("off (DSPARK_ACCEPTANCE_CAP=0)", {"engine_steps": 10}).startswith("off")


def test_each_engine_feature_has_a_flag_that_wins_over_the_environment():
    from dspark_serve.engine_config import SWITCHES, SwitchError

    options, rest = parse([*ARTICLE, "--no-dspark-repeat-drafts", "--dspark-governor=false", "--dspark-draft-handoff"])
    assert options.features == {"repeat_drafts": False, "governor": False, "draft_handoff": True} and "--dspark-governor=false" not in rest
    facts = build(options, rest, gpu=False, environ={"DSPARK_DRAFT_HANDOFF": "0", "DSPARK_GRAMMAR_DRAFTS": "0"})[1]
    assert facts["switches"] == {"repeat_drafts": False, "grammar_drafts": False, "draft_handoff": True, "acceptance_cap": True,
                                 "governor": False, "uniform_drafts": True, "structure_lookahead": True,
                                 "full_graphs": True}  # fmt: skip
    assert set(SWITCHES) == set(facts["switches"])  # every EngineConfig switch has its flag
    off = build(*parse([*ARTICLE, "--no-dspark-acceptance-cap"]), gpu=False)[1]["acceptance_cap"]
    assert off == "off (--no-dspark-acceptance-cap)"
    with pytest.raises(FlagError, match="--dspark-governor='maybe' is not true or false"):
        parse([*ARTICLE, "--dspark-governor=maybe"])
    with pytest.raises(SwitchError, match="DSPARK_GOVERNOR='2' is not 0 or 1"):
        build(*parse(ARTICLE), gpu=False, environ={"DSPARK_GOVERNOR": "2"})


def test_a_bad_switch_in_the_environment_exits_2_in_one_line(monkeypatch, capsys):
    monkeypatch.setenv("DSPARK_REPEAT_DRAFTS", "off")
    assert main(ARTICLE) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "DSPARK_REPEAT_DRAFTS='off' is not 0 or 1; fix:" in err[0]


FULL_EVERYWHERE = '{"cudagraph_mode": "FULL"}'


@pytest.mark.parametrize(
    "spelling",
    [
        ["--compilation-config", FULL_EVERYWHERE],
        [f"--compilation-config={FULL_EVERYWHERE}"],
        ["-cc", '{"cudagraph_mode": "full", "max_cudagraph_capture_size": 256}'],
        ["--compilation_config.cudagraph_mode", "FULL"],
        ["-cc.cudagraph_mode=FULL"],
    ],
)
def test_a_full_graph_for_every_batch_is_refused_while_speculating(spelling):
    # On an H100 this mode broke dspark-serve's answers (benchmarks/gpu/h100-s55-fullgraph-probe): one line,
    # naming the mode and the fix, before vLLM starts
    options, vllm_argv = parse([*ARTICLE, *spelling])
    with pytest.raises(FlagError, match=r"cudagraph_mode FULL gives wrong answers.*fix: drop it from --compilation-config"):
        build(options, vllm_argv, gpu=True)


@pytest.mark.parametrize(
    "extra",
    [
        ["--compilation-config", '{"cudagraph_mode": "FULL_AND_PIECEWISE"}'],
        ["-cc", '{"cudagraph_mode": "PIECEWISE"}'],
        ["--compilation-config", '{"max_cudagraph_capture_size": 256}'],
        ["--dspark-drafter", "off", "--compilation-config", FULL_EVERYWHERE],
    ],
)
def test_other_graph_modes_and_full_graphs_without_speculation_start(extra):
    options, vllm_argv = parse([*ARTICLE, *extra])
    argv, facts = build(options, vllm_argv, gpu=True)
    assert argv[argv.index(extra[-2]) + 1] == extra[-1]  # passed to vLLM as given
