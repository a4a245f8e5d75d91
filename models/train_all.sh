#!/usr/bin/env bash
# Reproduce the embedded models from nothing: tokenizer, training data, then the main and draft
# models side by side. Used by `make model`. On a machine without a GPU this runs on the CPU (slow).
#   usage: models/train_all.sh [OUT_DIR]     env: PYTHON, SAMPLES, STEPS, MAX_MINUTES, WORKERS
set -euo pipefail
PY=${PYTHON:-python3}
OUT=${1:-models}
WORKERS=${WORKERS:-$(nproc)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! $PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "make model: no GPU found, training on the CPU. Expect hours; STEPS=200 gives a rough model quickly." >&2
fi
$PY -m models.train tokenizer --workers "$WORKERS"
$PY -m models.train data --samples "${SAMPLES:-400000}" --out "$work/data.pt" --workers "$WORKERS"
common=(--data "$work/data.pt" --steps "${STEPS:-4000}" --max-minutes "${MAX_MINUTES:-inf}")
$PY -m models.train model --size main --out "$OUT/tiny-json" "${common[@]}" > "$work/main.log" 2>&1 &
main=$!
$PY -m models.train model --size draft --out "$OUT/tiny-json-draft" "${common[@]}" > "$work/draft.log" 2>&1 &
draft=$!
status=0
wait $main || status=$?
wait $draft || status=$?
grep -E 'parameters|step [0-9]+/' "$work/main.log" | tail -3
grep -E 'parameters|step [0-9]+/' "$work/draft.log" | tail -3
[ $status -eq 0 ] || { tail -20 "$work/main.log" "$work/draft.log" >&2; exit $status; }
