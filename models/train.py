"""Train the embedded model and its draft model from scratch on the scenarios' training split.

    python -m models.train tokenizer            # byte-level BPE -> models/tokenizer/
    python -m models.train data --out data.pt   # tokenised training pairs
    python -m models.train model --size main --data data.pt --out models/tiny-json

``make model`` runs all three (on a GPU when one is present, otherwise on the CPU, much slower).
Each model directory gets its weights (safetensors shards of at most 15 MB), config, tokenizer and a
TRAINING.md with steps, loss, wall time and hardware.
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

MODELS_DIR = Path(__file__).parent
TOKENIZER_DIR = MODELS_DIR / "tokenizer"

# Llama shapes. "main" is the embedded default (about 25M parameters: fast enough on two CPU cores
# and compute-bound at high concurrency); "draft" has the same tokenizer and ~5x fewer parameters.
SIZES: dict[str, dict[str, int]] = {
    "main": {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 6, "num_attention_heads": 8},
    "draft": {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 3, "num_attention_heads": 4},
    # Shallower drafters: a draft pass on the CPU costs per layer, not per parameter (overhead-bound at
    # this size), so depth is what a drafter's k sequential passes pay for (benchmarks/dspark/RESULTS.md).
    "draft-2l": {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 2, "num_attention_heads": 4},
    "draft-2w": {"hidden_size": 384, "intermediate_size": 1152, "num_hidden_layers": 2, "num_attention_heads": 6},
    "draft-1l": {"hidden_size": 384, "intermediate_size": 1152, "num_hidden_layers": 1, "num_attention_heads": 6},
    # Trains in seconds on a CPU: the pipeline's smoke test (data -> model -> a folder vLLM and transformers load),
    # tests/unit/test_training_pipeline.py; answers nothing.
    "tiny": {"hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 2},
}
LEARNING_RATES = {"main": 1e-3, "draft": 2e-3, "draft-2l": 2e-3, "draft-2w": 2e-3, "draft-1l": 2e-3, "tiny": 2e-3}  # main: 2e-3 and 1.5e-3 made the loss spike
MAX_LEN = 1024


def cmd_tokenizer(args: argparse.Namespace) -> None:
    from models.corpus import training_pairs
    from models.tokenizer import train_tokenizer

    pairs = training_pairs(args.samples, workers=args.workers)
    texts = [m["content"] for p in pairs for m in p.messages] + [p.completion for p in pairs]
    train_tokenizer(texts, Path(args.out))
    print(f"tokenizer trained on {len(texts)} texts -> {args.out}")


def cmd_schema_pairs(args: argparse.Namespace) -> None:
    from models.records import write_schema_pairs

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    count = write_schema_pairs(Path(args.root), Path(args.out))
    print(f"{count} JSONSchemaBench documents -> {args.out}")


def cmd_data(args: argparse.Namespace) -> None:
    from models.corpus import tokenized_pairs
    from models.tokenizer import load_tokenizer

    t0 = time.time()
    tok = load_tokenizer(TOKENIZER_DIR)
    pairs = tokenized_pairs(args.samples, str(TOKENIZER_DIR), workers=args.workers, schema_pairs=args.schema_pairs)
    rows = [(p, a) for p, a in pairs if len(p) + len(a) <= MAX_LEN]
    # pickle, not torch.save: torch.load's safe unpickler takes minutes over millions of small ints.
    with open(args.out, "wb") as f:
        pickle.dump({"rows": rows, "pad": tok.pad_token_id, "vocab": len(tok)}, f, protocol=pickle.HIGHEST_PROTOCOL)
    lengths = [len(p) + len(a) for p, a in rows]
    print(
        f"{len(rows)} sequences ({len(pairs) - len(rows)} over {MAX_LEN} dropped), mean {sum(lengths) / len(lengths):.0f} "
        f"tokens, max {max(lengths)}, {time.time() - t0:.0f}s -> {args.out}"
    )


def _batches(rows: list, token_budget: int, rng: random.Random) -> list[list[int]]:
    """Index batches of similar length whose padded size stays within ``token_budget``."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]) + len(rows[i][1]))
    batches, current, longest = [], [], 0
    for i in order:
        length = len(rows[i][0]) + len(rows[i][1])
        if current and max(longest, length) * (len(current) + 1) > token_budget:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


class _Collate:
    """Pads one index batch into (ids, labels, mask); runs in DataLoader workers, off the GPU's path."""

    def __init__(self, rows: list, pad: int) -> None:
        self.rows, self.pad = rows, pad

    def __call__(self, batch_of_one: list[list[int]]):
        import torch

        batch = batch_of_one[0]
        width = max(len(self.rows[i][0]) + len(self.rows[i][1]) for i in batch)
        ids = torch.full((len(batch), width), self.pad, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for r, i in enumerate(batch):
            prompt, answer = self.rows[i]
            seq = prompt + answer
            ids[r, : len(seq)] = torch.tensor(seq)
            labels[r, len(prompt) : len(seq)] = torch.tensor(answer)
            mask[r, : len(seq)] = 1
        return ids, labels, mask


def cmd_model(args: argparse.Namespace) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from models.tokenizer import load_tokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        print("No GPU found: training on the CPU. This is slow (hours); pass --steps to shorten it.", file=sys.stderr)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    args.lr = args.lr or LEARNING_RATES[args.size]
    with open(args.data, "rb") as f:
        data = pickle.load(f)
    rows, pad = data["rows"], data["pad"]
    tok = load_tokenizer(TOKENIZER_DIR)
    shape = SIZES[args.size]
    config = LlamaConfig(
        vocab_size=len(tok),
        max_position_embeddings=MAX_LEN,
        num_key_value_heads=shape["num_attention_heads"],
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=pad,
        **shape,
    )
    if args.init:  # continue from an earlier run's weights (e.g. more steps on another machine)
        model = LlamaForCausalLM.from_pretrained(args.init, dtype=torch.float32).to(device)
    else:
        model = LlamaForCausalLM(config).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{args.size}: {n_params / 1e6:.1f}M parameters on {device}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=device == "cuda")
    warmup = max(1, args.steps // 50)

    budget_s = args.max_minutes * 60

    def lr_at(step: int, elapsed: float) -> float:
        """Warm-up, then cosine to 10%, over steps or the time budget, whichever runs out first."""
        if step < warmup:
            return args.lr * (step + 1) / warmup
        progress = min(1.0, max((step - warmup) / (args.steps - warmup), elapsed / budget_s))
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    t0, step, log = time.time(), 0, []
    model.train()
    deadline = t0 + budget_s
    collate = _Collate(rows, pad)
    while step < args.steps and time.time() < deadline:
        loader = torch.utils.data.DataLoader(
            _batches(rows, args.batch_tokens, rng), batch_size=1, collate_fn=collate, num_workers=args.loader_workers
        )
        for ids, labels, mask in loader:
            if step >= args.steps or time.time() >= deadline:
                break
            ids, labels, mask = ids.to(device), labels.to(device), mask.to(device)
            for group in opt.param_groups:
                group["lr"] = lr_at(step, time.time() - t0)
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if step % args.log_every == 0 or step == args.steps:
                log.append((step, round(loss.item(), 4), round(time.time() - t0, 1)))
                print(f"{args.size} step {step}/{args.steps} loss {loss.item():.4f} {time.time() - t0:.0f}s", flush=True)
    wall = time.time() - t0
    out = Path(args.out)
    model.to(torch.bfloat16).save_pretrained(out, max_shard_size="15MB", safe_serialization=True)
    tok.save_pretrained(out)
    hardware = torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or platform.machine()
    _write_training_md(out, args, n_params, log, wall, hardware, len(rows), config)


def cmd_check(args: argparse.Namespace) -> None:
    """A quick quality look without vLLM (used on the training machine); models/evaluate.py is the real one."""
    import torch
    from transformers import AutoModelForCausalLM

    from dspark_bench.scenarios import Split, load_all
    from models.tokenizer import load_tokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = load_tokenizer(Path(args.model_dir))
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.bfloat16).to(device).eval()
    for scenario in load_all():
        samples = list(scenario.samples(Split.EVAL, args.per_scenario))
        prompts = [tok.apply_chat_template(s.messages, tokenize=False, add_generation_prompt=True) for s in samples]
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        with torch.no_grad():
            out = model.generate(
                **enc, max_new_tokens=400, do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
            )
        texts = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        parsed = exact = 0
        for sample, text in zip(samples, texts, strict=True):
            if sample.is_json:
                try:
                    value = json.loads(text)
                except ValueError:
                    continue
                parsed += 1
                exact += value == sample.answer
            else:
                parsed += 1
                exact += text.strip() == sample.answer_text()
        print(
            f"{Path(args.model_dir).name} {scenario.name}: parse {parsed}/{len(samples)} exact {exact}/{len(samples)}", flush=True
        )
        print(f"  e.g. {texts[0][:200]!r}", flush=True)


def _write_training_md(out: Path, args, n_params: int, log: list, wall: float, hardware: str, n_rows: int, config) -> None:
    import torch
    import transformers

    from models.corpus import MIX

    lines = [
        f"# Training record: {out.name}",
        "",
        f"- Reproduce: `make model` (or `python -m models.train model --size {args.size} --steps {args.steps} "
        f"--batch-tokens {args.batch_tokens} --lr {args.lr} --seed {args.seed}` after the `tokenizer` and `data` steps)",
        f"- Architecture: LlamaForCausalLM, {n_params / 1e6:.1f}M parameters, hidden {config.hidden_size}, "
        f"{config.num_hidden_layers} layers, {config.num_attention_heads} heads, vocab {config.vocab_size}, tied embeddings",
        f"- Data: {n_rows} (prompt, completion) sequences in models/corpus.py's MIX ({', '.join(f'{k} {v:g}' for k, v in MIX.items())}): "
        "the scenarios' train split (seeds below 1,000,000), made-up records and extractions, JSONSchemaBench documents "
        "(JME held out); "
        "loss on the completion only",
        f"- Optimiser: AdamW lr {args.lr} (warm-up then cosine to 10%), betas 0.9/0.95, wd 0.1, bf16 autocast, "
        f"~{args.batch_tokens} padded tokens per step",
        f"- Steps: {log[-1][0] if log else 0} of {args.steps} planned{' (stopped by the time budget)' if log and log[-1][0] < args.steps else ''}"
        f"{'; continued from ' + args.init if args.init else ''}; final loss {log[-1][1] if log else 'n/a'}; wall time {wall / 60:.1f} min",
        f"- Hardware: {hardware}; torch {torch.__version__}, transformers {transformers.__version__}",
        f"- Host: {platform.node()} ({os.cpu_count()} CPU cores)",
        "",
        "| step | loss | seconds |",
        "|---:|---:|---:|",
        *[f"| {s} | {loss_value} | {sec} |" for s, loss_value, sec in log[:: max(1, len(log) // 30)] + log[-1:]],
    ]
    (out / "TRAINING.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "training_log.json").write_text(json.dumps(log), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    from models.corpus import DEFAULT_SCHEMA_PAIRS

    parser = argparse.ArgumentParser(
        prog="python -m models.train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("tokenizer", help="train the BPE tokenizer")
    p.add_argument("--samples", type=int, default=40_000)
    p.add_argument("--out", default=str(TOKENIZER_DIR))
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p = sub.add_parser("data", help="tokenise the training split")
    p.add_argument("--samples", type=int, default=400_000)
    p.add_argument("--out", required=True)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--schema-pairs", default=str(DEFAULT_SCHEMA_PAIRS),
                   help="JSONSchemaBench folder, or the file `schema-pairs` wrote (default: %(default)s)")  # fmt: skip
    p = sub.add_parser("schema-pairs", help="extract JSONSchemaBench training documents to one small file")
    p.add_argument("--root", default=str(DEFAULT_SCHEMA_PAIRS))
    p.add_argument("--out", required=True)
    p = sub.add_parser("model", help="train one model")
    p.add_argument("--size", choices=sorted(SIZES), required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--batch-tokens", type=int, default=65536)
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: per size)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-minutes", type=float, default=float("inf"), help="stop early (and save) after this long")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--init", help="start from this model directory's weights instead of random ones")
    p.add_argument("--loader-workers", type=int, default=min(6, os.cpu_count() or 1))
    p = sub.add_parser("check", help="greedy-decode held-out prompts with transformers; print parse / exact rates")
    p.add_argument("model_dir")
    p.add_argument("--per-scenario", type=int, default=40)
    args = parser.parse_args(argv)
    {"tokenizer": cmd_tokenizer, "data": cmd_data, "schema-pairs": cmd_schema_pairs, "model": cmd_model, "check": cmd_check}[args.command](args)


if __name__ == "__main__":
    main()
