#!/usr/bin/env bash
# Start one server the way the harness's local arms start (CPU env, bf16, 1024 tokens), outside the
# harness, for profiling and quick side-by-side probes.
#   usage: studies/probe/serve.sh PORT LOG [dspark-serve / vLLM flags...]
#   e.g.:  studies/probe/serve.sh 8101 /tmp/dspark.log --dspark-enabled --response-format json \
#              --enable-prefix-caching --dspark-speculative-length 12
set -euo pipefail
port=$1 log=$2
shift 2
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
[ -f .venv/lib/libiomp5.so ] && export LD_PRELOAD=$PWD/.venv/lib/libiomp5.so
exec .venv/bin/python -m dspark_serve.serve --model models/tiny-json --served-model-name m --host 127.0.0.1 \
    --port "$port" --dtype bfloat16 --max-model-len 1024 "$@" >"$log" 2>&1
