#!/usr/bin/env bash
# Run the benchmark on an offline GPU host (Python 3.12 + torch, no network) from the repository root:
#   tools/gpu_host.sh receive DIR        keep the bundle parts found in DIR (send them in pieces)
#   tools/gpu_host.sh install            check and unpack the vLLM bundle (../shared/gpu/), make install
#   tools/gpu_host.sh models FILE        unpack the embedded models (a tar.xz of models/tiny-json*)
#   tools/gpu_host.sh bench NAME SECONDS ARGS...   dspark-bench bench ARGS into /tmp/runs/NAME, stopped
#                                        (Ctrl-C: results kept) after SECONDS; then packed into $OUT
#   tools/gpu_host.sh test NAME          make test-gpu's checks on the run /tmp/runs/NAME, the log into $OUT
set -euo pipefail
BUNDLE=/tmp/bundle SITE=/tmp/site RUNS=/tmp/runs
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
case "$1" in
  receive) mkdir -p "$BUNDLE" && cp "$2"/* "$BUNDLE"/ && ls -la "$BUNDLE" ;;
  install)
    (cd "$BUNDLE" && sha256sum -c --ignore-missing SHA256SUMS)
    [ -d "$SITE/vllm" ] || { mkdir -p "$SITE" && cat "$BUNDLE"/part-* | tar xJf - -C "$SITE"; }
    rm -f .venv/.installed-gpu; make install VLLM_BUILD=gpu OFFLINE_SITE="$SITE" || {  # a host Python without ensurepip: pip from outside
      python3 -m venv --without-pip --system-site-packages .venv
      echo "$SITE" > "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/offline-bundle.pth"
      python3 -m pip --python .venv/bin/python install -q --no-index --no-deps --no-build-isolation -e ./engine -e . && touch .venv/.installed-gpu; }
    .venv/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, torch.version.cuda)" ;;
  models) tar xJf "$2" -C models 2>/dev/null || { mkdir -p models && tar xJf "$2" -C models; }; ls models ;;
  bench)
    name=$2 seconds=$3; shift 3; mkdir -p "$RUNS"
    timeout -s INT -k 30 "$seconds" .venv/bin/dspark-bench bench --out "$RUNS" --name "$name" "$@" 2>&1 | tee "$RUNS/$name.log" || true
    tar cJf "${OUT:-/tmp}/$name.tar.xz" -C "$RUNS" "$name" "$name.log" ;;
  test)
    DSPARK_GPU_RUN="$RUNS/$2" .venv/bin/python -m pytest -q -m gpu tests/gpu 2>&1 | tee "${OUT:-/tmp}/test-gpu-$2.log" ;;
  *) echo "usage: $0 receive DIR | install | models FILE | bench NAME SECONDS ARGS... | test NAME" >&2; exit 2 ;;
esac
