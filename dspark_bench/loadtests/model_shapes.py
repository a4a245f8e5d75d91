"""Models of a realistic size with no weights to ship: a named shape (or a ``config.json`` of your own) beside the
run's tokenizer, served with vLLM's dummy weights (``--load-format dummy``: seeded, so every server of the run
holds the same ones). A step of such a model costs what the real model's does (the same layers, the same
memory traffic), but its answers are noise: a run on it is *cost-only*. Its ratios are over raw output tokens,
validity is not reported, and answers are still compared across arms at temperature 0 (a lossless arm answers
as stock vLLM does, noise or not).

The vocabulary is the tokenizer's (the embedded one: 3,308 tokens), not the shape's: a token id the tokenizer
cannot spell would fail the server's detokenizer. So ``llama-8b`` is Llama-3-8B's 32 decoder layers (6.98B
parameters) without its 128k-token embedding and head (1.05B)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
}
# Published configs' layer shapes (Meta's Llama 3.x); everything else comes from _LLAMA and the tokenizer.
SHAPES: dict[str, dict[str, Any]] = {
    "llama-8b": {**_LLAMA, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "rope_theta": 500000.0, "tie_word_embeddings": False},
    "llama-3b": {**_LLAMA, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28, "num_attention_heads": 24,
                 "num_key_value_heads": 8, "head_dim": 128, "rope_theta": 500000.0, "tie_word_embeddings": True},
    "llama-1b": {**_LLAMA, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 64, "rope_theta": 500000.0, "tie_word_embeddings": True},
}  # fmt: skip
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json", "tokenizer.model")
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")
LOAD_FORMAT = ("--load-format", "dummy")


class ShapeError(ValueError):
    """A model shape that cannot be built; the message names the fix."""


def is_known(shape: str) -> bool:
    """A named shape, or a path to a ``config.json`` (or a folder holding one)."""
    return shape in SHAPES or _config_file(shape).is_file()


def _config_file(shape: str) -> Path:
    path = Path(shape)
    return path / "config.json" if path.is_dir() else path


def shape_name(shape: str) -> str:
    """What the served model is called: the shape's name, or its config folder's (``my-shape.json``: my-shape)."""
    if shape in SHAPES:
        return shape
    path = Path(shape)
    return path.name if path.is_dir() else path.stem


def shaped_config(shape: str, tokenizer_model: Path) -> dict[str, Any]:
    """The shape's config.json with the tokenizer model's vocabulary size and special token ids."""
    if shape in SHAPES:
        layers = dict(SHAPES[shape])
    else:
        try:
            layers = json.loads(_config_file(shape).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ShapeError(f"model shape {shape}: {exc}; fix: name one of {', '.join(SHAPES)} or a config.json") from None
    layers.update(_token_facts(tokenizer_model))
    return layers


def _token_facts(tokenizer_model: Path) -> dict[str, Any]:
    """The vocabulary size and special token ids: the model's config.json where it has one, else (a tokenizer
    folder alone, such as models/tokenizer) the tokenizer's own count."""
    config_file = tokenizer_model / "config.json"
    if config_file.is_file():
        try:
            tokens = json.loads(config_file.read_text(encoding="utf-8"))
            return {"vocab_size": int(tokens["vocab_size"]), **{key: tokens[key] for key in TOKEN_IDS if key in tokens}}
        except (OSError, ValueError, KeyError) as exc:
            raise ShapeError(f"{config_file}: no vocab_size ({exc}); fix: --model names a model or tokenizer folder") from None
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_model / "tokenizer.json"))
        special = json.loads((tokenizer_model / "tokenizer_config.json").read_text(encoding="utf-8"))
        ids = {f"{name}_id": tokenizer.token_to_id(special[name]) for name in ("bos_token", "eos_token", "pad_token") if special.get(name)}
        return {"vocab_size": tokenizer.get_vocab_size(), **{key: value for key, value in ids.items() if value is not None}}
    except Exception as exc:  # noqa: BLE001 - any failure to read it is the same fix
        raise ShapeError(f"{tokenizer_model}: no tokenizer.json to size the vocabulary ({exc}); fix: --model names a model or tokenizer folder") from None


def write_shaped_model(shape: str, tokenizer_model: Path, out_dir: Path) -> Path:
    """A model folder of ``shape`` with ``tokenizer_model``'s tokenizer and no weights (served with
    ``LOAD_FORMAT``); ``out_dir``."""
    config = shaped_config(shape, tokenizer_model)
    out_dir.mkdir(parents=True, exist_ok=True)
    copied = [name for name in TOKENIZER_FILES if (tokenizer_model / name).is_file()]
    if "tokenizer.json" not in copied and "tokenizer.model" not in copied:
        raise ShapeError(f"{tokenizer_model} has no tokenizer; fix: --model names a model folder with tokenizer.json")
    for name in copied:
        shutil.copyfile(tokenizer_model / name, out_dir / name)
    if (generation := tokenizer_model / "generation_config.json").is_file():
        shutil.copyfile(generation, out_dir / generation.name)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return out_dir


def parameters(config: dict[str, Any]) -> int:
    """Parameters of a Llama-style config (embedding and head included; norms left out). Pure."""
    hidden, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    attention = hidden * head_dim * (2 * config["num_attention_heads"] + 2 * config["num_key_value_heads"])
    embedding = config["vocab_size"] * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return layers * (attention + 3 * hidden * inter) + embedding
