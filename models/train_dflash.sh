#!/usr/bin/env bash
# Train one-pass (dflash) drafters for the embedded model: the training data, then one drafter per depth,
# side by side on one GPU (each is small). See models/dflash.py for what is trained and why.
#   usage: models/train_dflash.sh OUT_DIR
#   env:   PYTHON, SAMPLES, WORKERS, LAYERS ("1 2 3"), STEPS, MINUTES (per drafter), LR
set -euo pipefail
PY=${PYTHON:-python3}
OUT=${1:?usage: models/train_dflash.sh OUT_DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$OUT"
$PY -m models.train data --samples "${SAMPLES:-120000}" --out "$work/data.pt" --workers "${WORKERS:-$(nproc)}"
for layers in ${LAYERS:-1 2 3}; do
  $PY -m models.dflash --data "$work/data.pt" --out "$OUT/tiny-json-dflash-${layers}l" --layers "$layers" \
    --steps "${STEPS:-8000}" --max-minutes "${MINUTES:-6}" --batch-seqs 64 --lr "${LR:-1.5e-3}" >"$OUT/dflash-${layers}l.log" 2>&1 &
done
wait
