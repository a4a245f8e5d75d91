"""A one-pass block drafter for the embedded model, in the checkpoint layout of vLLM's ``dflash`` method.

    python -m models.train data --samples 100000 --out data.pt
    python -m models.dflash --data data.pt --target models/tiny-json --out models/tiny-json-dflash

vLLM 0.32's ``DFlashDraftModel`` (``vllm/model_executor/models/qwen3_dflash.py``) drafts a whole block in
one forward pass: the query is ``[next token, mask, ..., mask]`` at the positions that follow the
verified text, each layer attends to the block itself (not causally) and to keys and values projected
from the *target's* hidden states at every earlier position (the outputs of ``target_layer_ids``,
concatenated, through ``fc`` and ``hidden_norm``; the same normed context feeds every layer's K/V
projection), and the shared LM head reads the drafts off the mask positions. ``DraftBlock`` below is
that computation written plainly in PyTorch for training, with the checkpoint's parameter names; a
mismatch would not error in vLLM, it would only make drafts miss, so ``tests/unit/test_dflash.py``
checks the layout and the serving test measures acceptance through vLLM itself.

Training distils the target: each block's labels are the target's own greedy next tokens along the
training text (what verification will accept), weighted towards the block's first positions, which
decide how much of a draft is accepted. The LM head is the target's (tied embeddings, frozen, not
saved: vLLM shares the target's). The draft ships its own copy of the input embeddings, so the mask
token's embedding can be learned.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import platform
import random
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

MASK_TOKEN_ID = 0  # the pad token: never generated, so a block's mask slots cannot collide with text
DEFAULT_TARGET_LAYERS = (1, 3, 4)  # decoder layer outputs (0-based) of the 6-layer target; not the last (pre-norm)
DEFAULT_BLOCK = 13  # next token + 12 drafts: dspark-serve's default speculative length


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(dtype) * self.weight.to(dtype)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding of ``x`` [..., seq, heads, head_dim] at ``positions`` [..., seq]."""
    half = x.shape[-1] // 2
    inv_freq = 1.0 / (theta ** (torch.arange(0, half, device=x.device, dtype=torch.float32) / half))
    angles = positions.float()[..., None] * inv_freq  # [..., seq, half]
    cos, sin = angles.cos()[..., None, :], angles.sin()[..., None, :]
    x1, x2 = x.float()[..., :half], x.float()[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, head_dim: int, eps: float, theta: float) -> None:
        super().__init__()
        self.heads, self.head_dim, self.theta = heads, head_dim, theta
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        self.q_norm = RMSNorm(head_dim, eps)
        self.k_norm = RMSNorm(head_dim, eps)

    def keys_values(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (*x.shape[:-1], self.heads, self.head_dim)
        k = rope(self.k_norm(self.k_proj(x).view(shape)), positions, self.theta)
        return k, self.v_proj(x).view(shape)

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, context_kv: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor
    ) -> torch.Tensor:
        q = rope(self.q_norm(self.q_proj(x).view(*x.shape[:-1], self.heads, self.head_dim)), positions, self.theta)
        k, v = self.keys_values(x, positions)
        keys = torch.cat([context_kv[0], k], dim=1).transpose(1, 2)  # [B, heads, ctx + query, head_dim]
        values = torch.cat([context_kv[1], v], dim=1).transpose(1, 2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask[:, None])
        return self.o_proj(out.transpose(1, 2).reshape(*x.shape[:-1], -1))


class Layer(nn.Module):
    def __init__(self, hidden: int, intermediate: int, heads: int, head_dim: int, eps: float, theta: float) -> None:
        super().__init__()
        self.self_attn = Attention(hidden, heads, head_dim, eps, theta)
        self.mlp = nn.ModuleDict(
            {
                "gate_proj": nn.Linear(hidden, intermediate, bias=False),
                "up_proj": nn.Linear(hidden, intermediate, bias=False),
                "down_proj": nn.Linear(intermediate, hidden, bias=False),
            }
        )
        self.input_layernorm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)

    def forward(self, x, positions, context, context_positions, mask):
        context_kv = self.self_attn.keys_values(context, context_positions)
        x = x + self.self_attn(self.input_layernorm(x), positions, context_kv, mask)
        h = self.post_attention_layernorm(x)
        return x + self.mlp["down_proj"](F.silu(self.mlp["gate_proj"](h)) * self.mlp["up_proj"](h))


class DraftBlock(nn.Module):
    """vLLM's DFlashQwen3Model, for training: parameter names are the checkpoint's."""

    def __init__(self, config: dict) -> None:
        super().__init__()
        hidden, eps = config["hidden_size"], config["rms_norm_eps"]
        theta = config["rope_parameters"]["rope_theta"]
        features = len(config["dflash_config"]["target_layer_ids"]) * hidden
        self.embed_tokens = nn.Embedding(config["vocab_size"], hidden)
        self.fc = nn.Linear(features, hidden, bias=False)
        self.hidden_norm = RMSNorm(hidden, eps)
        self.layers = nn.ModuleList(
            Layer(hidden, config["intermediate_size"], config["num_attention_heads"], config["head_dim"], eps, theta)
            for _ in range(config["num_hidden_layers"])
        )
        self.norm = RMSNorm(hidden, eps)

    def forward(self, block_ids, block_positions, target_features, context_positions, mask) -> torch.Tensor:
        """Hidden states of each block slot. ``mask`` [B, query, context + query]: what each slot may see."""
        context = self.hidden_norm(self.fc(target_features))
        x = self.embed_tokens(block_ids)
        for layer in self.layers:
            x = layer(x, block_positions, context, context_positions, mask)
        return self.norm(x)


def draft_config(target_config: dict, layers: int, target_layers: tuple[int, ...], block: int) -> dict:
    """config.json of a draft for ``target_config``: vLLM reads it as a DFlashDraftModel (model_type qwen3)."""
    hidden = target_config["hidden_size"]
    heads = target_config["num_attention_heads"]
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": hidden,
        "intermediate_size": target_config["intermediate_size"],
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "head_dim": target_config.get("head_dim", hidden // heads),
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "vocab_size": target_config["vocab_size"],
        "max_position_embeddings": target_config["max_position_embeddings"],
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "tie_word_embeddings": False,
        "attention_bias": False,
        "block_size": block,
        "dflash_config": {"target_layer_ids": list(target_layers), "mask_token_id": MASK_TOKEN_ID},
        "dtype": "bfloat16",
    }


def target_features(target, ids: torch.Tensor, mask: torch.Tensor, layers: tuple[int, ...]):
    """(features [B, T, len(layers) * hidden], the target's greedy next token at each position)."""
    captured: dict[int, torch.Tensor] = {}
    hooks = [
        target.model.layers[i].register_forward_hook(lambda _m, _i, out, i=i: captured.__setitem__(i, out[0] if isinstance(out, tuple) else out))
        for i in layers
    ]
    try:
        logits = target(input_ids=ids, attention_mask=mask).logits
    finally:
        for hook in hooks:
            hook.remove()
    return torch.cat([captured[i] for i in layers], dim=-1), logits.argmax(-1)


def make_blocks(lengths: list[tuple[int, int]], anchors: int, rng: random.Random) -> list[list[int]]:
    """Per sequence (prompt length, total length): ``anchors`` positions where a block starts, in the answer."""
    out = []
    for prompt, total in lengths:
        first, last = prompt, max(prompt, total - 2)
        out.append([rng.randint(first, last) for _ in range(anchors)])
    return out


def block_batch(ids, greedy, lengths: list[tuple[int, int]], starts: list[list[int]], block: int, weights_gamma: float):
    """Block inputs, positions, labels, loss weights and the attention mask for ``starts`` (anchor positions)."""
    device = ids.device
    batch, width = ids.shape
    anchor = torch.tensor(starts, device=device)  # [B, A]
    offsets = torch.arange(block, device=device)
    positions = (anchor[..., None] + offsets).reshape(batch, -1)  # [B, A*block]
    block_ids = torch.full_like(positions, MASK_TOKEN_ID)
    first = torch.gather(ids, 1, anchor)
    block_ids.view(batch, -1, block)[..., 0] = first
    # Slot j (1..block-1) drafts the token at p + j: the target's greedy choice after the text up to p + j - 1.
    label_from = (positions - 1).clamp(max=width - 1)
    labels = torch.gather(greedy, 1, label_from)
    totals = torch.tensor([total for _, total in lengths], device=device)[:, None]
    valid = (offsets > 0).repeat(anchor.shape[1])[None, :] & (positions < totals)
    weights = torch.exp(-(offsets.float() - 1).clamp(min=0) / weights_gamma).repeat(anchor.shape[1])[None, :] * valid
    query = positions.shape[1]
    context_visible = torch.arange(width, device=device)[None, None, :] < anchor.repeat_interleave(block, 1)[..., None]
    slot_block = torch.arange(query, device=device) // block
    block_visible = (slot_block[:, None] == slot_block[None, :])[None].expand(batch, -1, -1)
    mask = torch.cat([context_visible, block_visible], dim=-1)
    return block_ids, positions.clamp(max=width + block), labels, weights, mask


def accepted_length(predicted: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor, block: int) -> float:
    """Mean number of leading drafts per block that match the labels (what verification would accept)."""
    hit = ((predicted == labels) & valid).view(predicted.shape[0], -1, block)[..., 1:]
    return hit.int().cumprod(-1).sum(-1).float().mean().item()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m models.dflash", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="output of `python -m models.train data`")
    parser.add_argument("--target", default="models/tiny-json")
    parser.add_argument("--out", required=True)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--target-layers", default=",".join(map(str, DEFAULT_TARGET_LAYERS)))
    parser.add_argument("--block", type=int, default=DEFAULT_BLOCK)
    parser.add_argument("--anchors", type=int, default=24, help="blocks per sequence per step")
    parser.add_argument("--batch-seqs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--max-minutes", type=float, default=float("inf"))
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--gamma", type=float, default=7.0, help="loss weight decay over block slots")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    with open(args.data, "rb") as f:
        data = pickle.load(f)
    rows, pad = data["rows"], data["pad"]
    rng.shuffle(rows)
    held_out, rows = rows[:256], rows[256:]
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.bfloat16).to(device).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    target_config = json.loads((Path(args.target) / "config.json").read_text())
    target_layers = tuple(int(x) for x in args.target_layers.split(","))
    config = draft_config(target_config, args.layers, target_layers, args.block)
    draft = DraftBlock(config).to(device)
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(target.model.embed_tokens.weight.float())
    lm_head = target.lm_head.weight  # tied to the target's embeddings; vLLM shares it
    opt = torch.optim.AdamW(draft.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    warmup = max(1, args.steps // 50)

    def batch_of(chosen):
        width = max(len(p) + len(a) for p, a in chosen)
        ids = torch.full((len(chosen), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chosen), width), dtype=torch.long)
        for r, (p, a) in enumerate(chosen):
            ids[r, : len(p) + len(a)] = torch.tensor(p + a)
            mask[r, : len(p) + len(a)] = 1
        return ids.to(device), mask.to(device), [(len(p), len(p) + len(a)) for p, a in chosen]

    def step_on(chosen, train: bool):
        ids, attn, lengths = batch_of(chosen)
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
            features, greedy = target_features(target, ids, attn, target_layers)
        starts = make_blocks(lengths, args.anchors, rng)
        block_ids, positions, labels, weights, mask = block_batch(ids, greedy, lengths, starts, args.block, args.gamma)
        context_positions = torch.arange(ids.shape[1], device=device)[None].expand(ids.shape[0], -1)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"), torch.set_grad_enabled(train):
            hidden = draft(block_ids, positions, features.float(), context_positions, mask)
            logits = hidden @ lm_head.to(hidden.dtype).T
        losses = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="none").view_as(weights)
        loss = (losses * weights).sum() / weights.sum()
        return loss, accepted_length(logits.argmax(-1), labels, weights > 0, args.block)

    t0, log = time.time(), []
    deadline = t0 + args.max_minutes * 60
    step = 0
    while step < args.steps and time.time() < deadline:
        progress = min(1.0, max(step / args.steps, (time.time() - t0) / (args.max_minutes * 60)))
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in opt.param_groups:
            group["lr"] = lr
        loss, accepted = step_on(rng.sample(rows, args.batch_seqs), train=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step % 100 == 0 or step == args.steps:
            draft.eval()
            with torch.no_grad():
                held_loss, held_accepted = step_on(held_out[:128], train=False)
            draft.train()
            log.append((step, round(loss.item(), 4), round(held_loss.item(), 4), round(held_accepted, 2), round(time.time() - t0, 1)))
            print(f"step {step} loss {loss.item():.4f} held-out loss {held_loss.item():.4f} accepted {held_accepted:.2f}/{args.block - 1} {time.time() - t0:.0f}s", flush=True)
    save(draft, config, Path(args.out), args, log, time.time() - t0, device)


def save(draft: DraftBlock, config: dict, out: Path, args, log: list, wall: float, device: str) -> None:
    from huggingface_hub import save_torch_state_dict

    out.mkdir(parents=True, exist_ok=True)
    tensors = {name: value.detach().to(torch.bfloat16).contiguous().cpu() for name, value in draft.state_dict().items()}
    save_torch_state_dict(tensors, str(out), max_shard_size="15MB")  # shards under 16 MB: the repo's file-size habit
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    hardware = torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or platform.machine()
    n_params = sum(v.numel() for v in tensors.values())
    last = log[-1] if log else None
    lines = [
        f"# Training record: {out.name}",
        "",
        f"- Reproduce: `python -m models.dflash --data DATA --target {args.target} --out {out} --layers {args.layers} "
        f"--target-layers {args.target_layers} --block {args.block} --anchors {args.anchors} --batch-seqs {args.batch_seqs} "
        f"--steps {args.steps} --lr {args.lr} --gamma {args.gamma} --seed {args.seed}` (DATA: `python -m models.train data`)",
        f"- Architecture: vLLM DFlashDraftModel (qwen3 layers), {config['num_hidden_layers']} layer(s), hidden {config['hidden_size']}, "
        f"block {args.block} (next token + {args.block - 1} drafts), target layers {config['dflash_config']['target_layer_ids']}, "
        f"{n_params / 1e6:.1f}M parameters saved (LM head shared with the target)",
        "- Labels: the target's greedy next tokens along the training text; slot weights exp(-(j-1)/gamma)",
        f"- Steps: {last[0] if last else 0} of {args.steps}; final held-out loss {last[2] if last else 'n/a'}, "
        f"held-out accepted drafts per block {last[3] if last else 'n/a'} of {args.block - 1} (teacher-forced); wall {wall / 60:.1f} min",
        f"- Hardware: {hardware}; torch {torch.__version__}",
        "",
        "| step | loss | held-out loss | accepted | seconds |",
        "|---:|---:|---:|---:|---:|",
        *[f"| {s} | {a} | {b} | {c} | {d} |" for s, a, b, c, d in log[:: max(1, len(log) // 30)] + log[-1:]],
    ]
    (out / "TRAINING.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    size = sum(os.path.getsize(f) for f in out.glob("*.safetensors"))
    print(f"saved {out} ({size / 1e6:.1f} MB)", file=sys.stderr)


def load_draft(directory: Path) -> tuple[DraftBlock, dict]:
    from safetensors.torch import load_file

    config = json.loads((directory / "config.json").read_text())
    draft = DraftBlock(config)
    weights = {k: v.float() for shard in sorted(directory.glob("*.safetensors")) for k, v in load_file(str(shard)).items()}
    draft.load_state_dict(weights)
    return draft.eval(), config


@torch.no_grad()
def simulate(target, draft: DraftBlock, config: dict, prompt: list[int], answer: list[int]) -> tuple[int, int]:
    """(verification steps, accepted drafts) when ``draft`` drafts ``answer`` (the target's greedy answer to
    ``prompt``) the way vLLM's dflash proposer does: after each step the block starts at the next unverified
    token, over the target's features of everything before it."""
    block = config["block_size"]
    layers = tuple(config["dflash_config"]["target_layer_ids"])
    ids = torch.tensor([prompt + answer])
    features, _ = target_features(target, ids, torch.ones_like(ids), layers)
    features = features.float()
    start, steps, accepted = len(prompt), 0, 0
    total = len(prompt) + len(answer)
    while start < total - 1:
        positions = torch.arange(start, start + block)[None]
        block_ids = torch.full((1, block), MASK_TOKEN_ID)
        block_ids[0, 0] = ids[0, start]
        mask = torch.ones((1, block, start + block), dtype=torch.bool)
        hidden = draft(block_ids, positions, features[:, :start], torch.arange(start)[None], mask)
        drafts = (hidden @ target.lm_head.weight.float().T).argmax(-1)[0, 1:].tolist()
        truth = ids[0, start + 1 : start + block].tolist()
        hits = next((j for j, (d, t) in enumerate(zip(drafts, truth, strict=False)) if d != t), len(truth))
        steps, accepted = steps + 1, accepted + hits
        start += hits + 1
    return steps, accepted


def evaluate(argv: list[str]) -> None:
    """Acceptance per verification step on held-out prompts, decoded greedily by the target (transformers)."""
    from transformers import AutoModelForCausalLM

    from dspark_bench.scenarios import Split, load_scenario
    from models.tokenizer import load_tokenizer

    parser = argparse.ArgumentParser(prog="python -m models.dflash evaluate")
    parser.add_argument("draft")
    parser.add_argument("--target", default="models/tiny-json")
    parser.add_argument("--scenario", default="order_extraction")
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args(argv)
    tok = load_tokenizer(Path(args.target))
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32).eval()
    draft, config = load_draft(Path(args.draft))
    steps = accepted = 0
    for sample in load_scenario(args.scenario).samples(Split.EVAL, args.requests):
        text = tok.apply_chat_template(sample.messages, tokenize=False, add_generation_prompt=True)
        prompt = tok(text, add_special_tokens=False)["input_ids"]
        out = target.generate(torch.tensor([prompt]), max_new_tokens=400, do_sample=False, eos_token_id=tok.eos_token_id)
        s, a = simulate(target, draft, config, prompt, out[0, len(prompt) :].tolist())
        steps, accepted = steps + s, accepted + a
    print(f"{args.scenario}: {args.requests} requests, {steps} steps, {accepted} accepted, {accepted / steps:.2f} per step")


if __name__ == "__main__":
    if sys.argv[1:2] == ["evaluate"]:
        evaluate(sys.argv[2:])
    else:
        main()
