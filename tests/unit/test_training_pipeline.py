"""The training pipeline end to end on the CPU, at the size that trains in seconds (``models.train`` size
``tiny``): the data step over the whole training mix, a few optimiser steps, and a model folder with its
tokenizer and training record that transformers loads and generates from. What a GPU training run relies on,
checked before GPU time is spent on it."""

import json
import math

import pytest

from models import records, train


def test_data_then_a_tiny_model_then_a_folder_that_loads_and_generates(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    bench = tmp_path / "bench" / "Github_easy"  # JSONSchemaBench's layout, one entry (../shared may be absent)
    bench.mkdir(parents=True)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    (bench / "x.json").write_text(json.dumps({"schema": schema, "tests": [{"valid": True, "data": {"a": 1}}]}), encoding="utf-8")
    pairs = tmp_path / "pairs.jsonl"
    assert records.write_schema_pairs(tmp_path / "bench", pairs) == 1
    data, out = tmp_path / "data.pt", tmp_path / "tiny"
    train.main(["data", "--samples", "300", "--out", str(data), "--workers", "1", "--schema-pairs", str(pairs)])
    train.main(["model", "--size", "tiny", "--data", str(data), "--out", str(out), "--steps", "4", "--batch-tokens", "4096",
                "--log-every", "2", "--loader-workers", "0"])  # fmt: skip
    log = json.loads((out / "training_log.json").read_text(encoding="utf-8"))
    assert [step for step, _, _ in log] == [2, 4] and all(math.isfinite(loss) for _, loss, _ in log)
    assert "extraction 0.2" in (out / "TRAINING.md").read_text(encoding="utf-8")  # the mix it trained on, recorded
    tok = transformers.AutoTokenizer.from_pretrained(out)
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    prompt = tok.apply_chat_template([{"role": "user", "content": "Extract the invoice as JSON."}], add_generation_prompt=True, return_tensors="pt")
    ids = prompt["input_ids"] if hasattr(prompt, "keys") else prompt
    generated = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert generated.shape[1] == ids.shape[1] + 4 or tok.eos_token_id in generated[0].tolist()
