#!/usr/bin/env bash
# Broaden the embedded model to schemas it has never seen, then train its one-pass drafter against it:
# training data from the scenarios, made-up records and JSONSchemaBench documents (models/corpus.py MIX),
# the main model continued from models/tiny-json, and a 2-layer dflash drafter trained from scratch.
#   usage: models/train_broad.sh OUT_DIR      (OUT_DIR/tiny-json, OUT_DIR/tiny-json-dflash)
#   env:   PYTHON, SCHEMA_PAIRS (JSONSchemaBench folder or `python -m models.train schema-pairs` file),
#          SAMPLES, WORKERS, MAIN_MINUTES, DRAFT_MINUTES, LR (main), INIT (the main model it continues from,
#          default models/tiny-json: a GPU host that already holds it elsewhere need not receive it again)
set -euo pipefail
PY=${PYTHON:-python3}
OUT=${1:?usage: models/train_broad.sh OUT_DIR}
# What the steps import, checked before anything runs (an offline GPU image has torch and transformers, not jsonschema).
$PY -c "import jsonschema, torch, transformers, yaml" 2>/dev/null || {
  echo "models/train_broad.sh: $PY lacks jsonschema, torch, transformers or pyyaml: install them (offline host: carry their wheels, docs/engine-patch.md)" >&2
  exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$OUT"
schema_args=()
[ -z "${SCHEMA_PAIRS:-}" ] || schema_args=(--schema-pairs "$SCHEMA_PAIRS")
$PY -m models.train data --samples "${SAMPLES:-250000}" --out "$work/data.pt" --workers "${WORKERS:-$(nproc)}" "${schema_args[@]}"
$PY -m models.train model --size main --data "$work/data.pt" --out "$OUT/tiny-json" --init "${INIT:-models/tiny-json}" \
  --steps 8000 --max-minutes "${MAIN_MINUTES:-4}" --lr "${LR:-0.0005}"
cp "${INIT:-models/tiny-json}/dspark.json" "$OUT/tiny-json/"
$PY -m models.dflash --data "$work/data.pt" --target "$OUT/tiny-json" --out "$OUT/tiny-json-dflash" --layers 2 \
  --target-layers 1,3,4 --block 13 --anchors 24 --batch-seqs 64 --steps 8000 --lr 0.0015 --gamma 7.0 --seed 0 \
  --max-minutes "${DRAFT_MINUTES:-4}"
