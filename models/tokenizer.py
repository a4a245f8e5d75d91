"""The byte-level BPE tokenizer and chat template shared by the embedded model and its draft model."""

from __future__ import annotations

from pathlib import Path

BOS, EOS, PAD = "<|begin|>", "<|end|>", "<|pad|>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]
VOCAB_SIZE = 8192

# Every turn ends with <|end|>, which is also the EOS token: generation stops where the answer ends.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def train_tokenizer(texts: list[str], out_dir: Path, vocab_size: int = VOCAB_SIZE) -> None:
    """Train on ``texts`` and save HF files (tokenizer.json, tokenizer_config.json, chat template)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Han characters and digits one by one: values are copied from the input, and a small model copies
    # frequent single-character tokens exactly, where long rare merges (a whole address) it garbles.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\p{Han}"), behavior="isolated"),
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS, *ROLE_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD)
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 1024
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out_dir)


def load_tokenizer(path: Path):  # -> PreTrainedTokenizerFast
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))
