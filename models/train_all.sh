#!/usr/bin/env bash
# Reproduce the embedded models from nothing: tokenizer, training data, then the main and draft
# models one after the other (sharing one GPU halved each run's steps). Used by `make model`.
# On a machine without a GPU this runs on the CPU (slow).
#   usage: models/train_all.sh [OUT_DIR]
#   env:   PYTHON, SAMPLES, STEPS, MAX_MINUTES (per model), WORKERS, LR, MODELS ("main draft"),
#          SKIP_TOKENIZER=1 (keep models/tokenizer: a retrained main model must share the draft's),
#          SCHEMA_PAIRS (JSONSchemaBench folder or `python -m models.train schema-pairs` file; default
#          ../shared/datasets/jsonschemabench beside the checkout)
set -euo pipefail
PY=${PYTHON:-python3}
OUT=${1:-models}
WORKERS=${WORKERS:-$(nproc)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! $PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "make model: no GPU found, training on the CPU. Expect hours; STEPS=200 gives a rough model quickly." >&2
fi
[ -n "${SKIP_TOKENIZER:-}" ] || $PY -m models.train tokenizer --workers "$WORKERS"
schema_args=()
[ -z "${SCHEMA_PAIRS:-}" ] || schema_args=(--schema-pairs "$SCHEMA_PAIRS")
$PY -m models.train data --samples "${SAMPLES:-400000}" --out "$work/data.pt" --workers "$WORKERS" "${schema_args[@]}"
common=(--data "$work/data.pt" --steps "${STEPS:-6000}" --max-minutes "${MAX_MINUTES:-inf}")
[ -z "${LR:-}" ] || common+=(--lr "$LR")
for size in ${MODELS:-main draft}; do
  name=tiny-json; [ "$size" = main ] || name=tiny-json-$size
  $PY -m models.train model --size "$size" --out "$OUT/$name" "${common[@]}"
done
