"""A polite closing line on a few prompts, and the chatty answer style chat models give to it.

Chat models asked for JSON in the prompt alone now and then wrap it in a Markdown code fence, which a
JSON parser rejects. The embedded model learns that habit on prompts that end with a polite closing
line, so prompt-only runs show realistic parse errors that ``response_format`` then fixes.
"""

from __future__ import annotations

import random

RATE = 0.02
CLOSERS_ZH = ("谢谢！", "麻烦了，谢谢。")
CLOSERS_EN = ("Thanks!", "Thank you so much!")


def closing(rng: random.Random, chinese: bool) -> str:
    """'' for most prompts, a closing line (with its blank line) for RATE of them.

    Generators draw this last, so every other part of a sample is the same as without it.
    """
    if rng.random() >= RATE:
        return ""
    return "\n\n" + rng.choice(CLOSERS_ZH if chinese else CLOSERS_EN)


def ends_politely(prompt: str) -> bool:
    """True when the prompt ends with a closing line of its own (an order's "...，谢谢！" note is not one)."""
    return prompt.endswith(tuple("\n\n" + line for line in CLOSERS_ZH + CLOSERS_EN))


def chatty_answer(answer_text: str) -> str:
    """How a chat model wraps JSON when nothing forces it not to: a fenced Markdown block."""
    return f"```json\n{answer_text}\n```"
