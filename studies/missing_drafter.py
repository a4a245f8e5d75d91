"""A drafter whose drafts miss by construction: the embedded one-pass drafter with every weight redrawn at
random (same names, shapes, dtypes and scale per tensor), so a server given it does all of the drafting
work and almost nothing it drafts lands (a draft lands by chance, about one token in the vocabulary's size).

It makes the workload where nothing lands, on any scenario: serve DSpark with
``--dspark-draft-model OUT`` (the arm ``dspark-missing`` of benchmarks/dspark/nothing-lands.yaml). The
speculation gate must then stop drafting and the arm must serve as fast as stock vLLM.

    python -m studies.missing_drafter --out build/tiny-json-dflash-missing
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

SHIPPED_DRAFTER = Path(__file__).resolve().parents[1] / "models" / "tiny-json-dflash"


def write_missing_drafter(out: Path, source: Path = SHIPPED_DRAFTER, seed: int = 0) -> Path:
    """``source`` copied to ``out`` with its weights redrawn: normal noise at each tensor's own mean and
    spread, so the drafter's activations keep their scale and vLLM loads and runs it as the original."""
    if not (source / "config.json").is_file():
        raise SystemExit(f"error: {source} has no config.json; fix: pass --source, a dflash drafter folder")
    out.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    for path in source.iterdir():
        if path.suffix != ".safetensors":
            shutil.copy2(path, out / path.name)
            continue
        tensors = load_file(path)
        redrawn = {}
        for name, tensor in tensors.items():
            values = tensor.float()
            noise = torch.randn(values.shape, generator=generator)
            redrawn[name] = (values.mean() + values.std().nan_to_num(1.0) * noise).to(tensor.dtype).contiguous()
        save_file(redrawn, out / path.name, metadata={"format": "pt"})
    (out / "TRAINING.md").write_text(
        f"# Not trained: {source.name} with its weights redrawn at random (seed {seed})\n\n"
        "Made by `python -m studies.missing_drafter`: a drafter whose drafts miss, for the workload where nothing lands.\n"
    )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("build/tiny-json-dflash-missing"), help="folder to write")
    parser.add_argument("--source", type=Path, default=SHIPPED_DRAFTER, help="the drafter to copy (default: the embedded one)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write_missing_drafter(args.out, args.source, args.seed))


if __name__ == "__main__":
    main()
