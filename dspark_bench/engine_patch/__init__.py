"""The DSpark engine patch: the article's one-line switch (``--dspark-enabled`` ...) made real on vLLM.

Stands alone: it imports vLLM and nothing else of this project.
"""

SUPPORTED_VLLM = "0.32.0"
