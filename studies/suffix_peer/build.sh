#!/usr/bin/env bash
# vLLM's `suffix` speculative method (suffix decoding) imports arctic-inference, which has no wheel for
# this Python and whose full build targets CUDA and registers a vLLM plugin of its own. This builds only
# the part vLLM imports, arctic_inference.suffix_decoding (one nanobind C++ module and two Python files),
# against this venv's Python, into OUT (default build/arctic-suffix). Nothing is installed: the peers
# benchmark puts OUT on the suffix arm's PYTHONPATH (benchmarks/dspark/peers/config.yaml).
#   usage: studies/suffix_peer/build.sh [OUT]        env: PYTHON (default .venv/bin/python)
set -euo pipefail
PYTHON=${PYTHON:-.venv/bin/python}
PY="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")"  # absolute, but still the venv's (no symlink resolved)
OUT=${1:-build/arctic-suffix}
VERSION=0.3.0
NANOBIND=2.9.2  # the version arctic-inference 0.3.0's pyproject pins
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m pip download -q --no-deps --no-build-isolation --no-binary :all: "arctic-inference==$VERSION" -d "$work"
tar xzf "$work/arctic_inference-$VERSION.tar.gz" -C "$work"
"$PY" -m pip install -q --target "$work/nanobind" "nanobind==$NANOBIND"
src="$work/arctic_inference-$VERSION"
PYTHONPATH="$work/nanobind" cmake -S "$src/csrc/suffix_decoding" -B "$work/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$PY" >/dev/null
cmake --build "$work/build" >/dev/null
mkdir -p "$OUT/arctic_inference/suffix_decoding"
touch "$OUT/arctic_inference/__init__.py"
cp "$src"/arctic_inference/suffix_decoding/*.py "$OUT/arctic_inference/suffix_decoding/"
cp "$work"/build/_C*.so "$OUT/arctic_inference/suffix_decoding/"
PYTHONPATH="$OUT" "$PY" -c "from arctic_inference.suffix_decoding import SuffixDecodingCache; print('built: arctic_inference.suffix_decoding in $OUT')"
