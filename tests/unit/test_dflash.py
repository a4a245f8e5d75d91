"""The one-pass block drafter (models/dflash.py): its training batches show each draft slot what vLLM's
dflash shows it, and the shipped checkpoint drafts the embedded model's answers nearly whole."""

import json
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from models import dflash  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "tiny-json-dflash"
TARGET = SHIPPED.parent / "tiny-json"


def test_block_batch_sees_earlier_context_and_its_own_block_only():
    block = 4
    ids = torch.arange(10, 20)[None]  # one sequence of 10 tokens
    greedy = ids + 100  # the target's "next token" at each position
    block_ids, positions, labels, weights, mask = dflash.block_batch(ids, greedy, [(3, 10)], [[3, 8]], block, 7.0)
    assert positions.tolist() == [[3, 4, 5, 6, 8, 9, 10, 11]]
    # slot 0 holds the known next token, the others the mask token
    assert block_ids.tolist() == [[13, 0, 0, 0, 18, 0, 0, 0]]
    # slot j drafts the token at p + j: the target's greedy choice after position p + j - 1
    assert labels[0, 1:4].tolist() == [113, 114, 115]
    assert weights[0, 0] == 0 and weights[0, 1] == 1 and weights[0, 2] < 1
    assert weights[0, 5] > 0 and weights[0, 6] == 0  # position 10 is past the sequence's end
    context, own = mask[0, :, :10], mask[0, :, 10:]
    assert context[0].tolist() == [True] * 3 + [False] * 7  # the block at 3 sees positions 0-2
    assert context[4].tolist() == [True] * 8 + [False] * 2
    assert own[1].tolist() == [True] * 4 + [False] * 4  # the whole own block, both ways (not causal)
    assert own[5].tolist() == [False] * 4 + [True] * 4


def test_shipped_checkpoint_has_the_layout_vllm_loads():
    config = json.loads((SHIPPED / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["model_type"] == "qwen3"
    assert config["block_size"] == 13 and config["dflash_config"]["mask_token_id"] == dflash.MASK_TOKEN_ID
    draft, _ = dflash.load_draft(SHIPPED)  # strict: every parameter present, none extra
    names = set(draft.state_dict())
    assert "fc.weight" in names and "layers.1.self_attn.k_norm.weight" in names and "lm_head.weight" not in names


def test_shipped_drafter_drafts_the_targets_answers_nearly_whole():
    """Greedy answers of the target to held-out prompts, drafted as vLLM's dflash drafts them: 10.9 of 12
    accepted per step measured (vLLM's own counters agree: 10.9). A drafter that attended causally
    inside its block, or placed the block one position off, lands far fewer."""
    from transformers import AutoModelForCausalLM

    from dspark_bench.scenarios import Split, load_scenario
    from models.tokenizer import load_tokenizer

    random.seed(0)
    tok = load_tokenizer(TARGET)
    target = AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32).eval()
    draft, config = dflash.load_draft(SHIPPED)
    steps = accepted = 0
    for sample in load_scenario("order_extraction").samples(Split.EVAL, 3):
        text = tok.apply_chat_template(sample.messages, tokenize=False, add_generation_prompt=True)
        prompt = tok(text, add_special_tokens=False)["input_ids"]
        answer = target.generate(torch.tensor([prompt]), max_new_tokens=300, do_sample=False, eos_token_id=tok.eos_token_id)
        s, a = dflash.simulate(target, draft, config, prompt, answer[0, len(prompt) :].tolist())
        steps, accepted = steps + s, accepted + a
    assert accepted / steps > 9.0
