#!/usr/bin/env bash
# Run the benchmark on an offline GPU host (Python 3.12 + torch, no network) from the repository root:
#   tools/gpu_host.sh receive DIR        keep the bundle parts found in DIR (send them in pieces)
#   tools/gpu_host.sh install            check and unpack the vLLM bundle (../shared/gpu/), make install
#   tools/gpu_host.sh models FILE        unpack the embedded models (a tar.xz of models/tiny-json*)
#   tools/gpu_host.sh bench NAME SECONDS ARGS...   dspark-bench bench ARGS into /tmp/runs/NAME, stopped
#                                        (Ctrl-C: results kept) after SECONDS; then packed into $OUT
#   tools/gpu_host.sh test NAME          make test-gpu's checks on the run /tmp/runs/NAME, the log into $OUT
#   tools/gpu_host.sh queue FILE         the runs FILE lists, one a line (NAME SECONDS ARGS..., as for bench; # comments),
#                                        one after another in the background, each packed into /tmp/packed; returns at once
#   tools/gpu_host.sh wait SECONDS       until the queue is done or SECONDS have passed; the runs packed since the last
#                                        wait into $OUT; exit 0 once the queue is done, 3 while it runs
#   tools/gpu_host.sh train NAME [VAR=VALUE...]   models/train_broad.sh into /tmp/train/NAME in the background
#                                        (the image's torch; jsonschema from wheels in $WHEELS if the image lacks it);
#                                        VARs are train_broad.sh's (MAIN_MINUTES=9 SCHEMA_PAIRS=FILE ...); returns at once
#   tools/gpu_host.sh collect NAME       while training: the log's tail, exit 3; when done: the weights and records
#                                        into $OUT as NAME.tar.part-* (15 MiB each; cat them | tar x), exit as training did
set -euo pipefail
BUNDLE=/tmp/bundle SITE=/tmp/site RUNS=/tmp/runs PACKED=/tmp/packed TRAIN=${TRAIN:-/tmp/train} WHEELS=${WHEELS:-.whl}
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
  queue)  # setsid: the runs outlive this call (a device call ends after 10 minutes); queue.done says when all ended
    file=${2:?usage: $0 queue FILE}; [ -f "$file" ] || { echo "$0: no queue file $file" >&2; exit 2; }
    mkdir -p "$RUNS" "$PACKED"; rm -f "$RUNS/queue.done"
    setsid "$0" run-queue "$file" > "$RUNS/queue.log" 2>&1 < /dev/null &
    echo "running the queue $file in the background (log $RUNS/queue.log); then: $0 wait SECONDS" ;;
  run-queue)
    while read -r line; do
      [[ -z "$line" || "$line" == \#* ]] && continue
      eval "set -- $line"; echo "== $(date -u +%H:%M:%S) $1"; OUT="$PACKED" "$0" bench "$@" || true
    done < "$2"
    touch "$RUNS/queue.done" ;;
  wait)
    deadline=$((SECONDS + ${2:?usage: $0 wait SECONDS}))
    until [ -f "$RUNS/queue.done" ] || [ "$SECONDS" -ge "$deadline" ]; do sleep 5; done
    for packed in "$PACKED"/*.tar.xz; do
      [ ! -e "$packed" ] || [ -e "$packed.sent" ] || { cp "$packed" "${OUT:-/tmp}/" && touch "$packed.sent"; }
    done
    grep "^== \|^run folder\|warning\|error" "$RUNS/queue.log" | tail -n 8 || true
    [ -f "$RUNS/queue.done" ] || { echo "$0: the queue is still running" >&2; exit 3; } ;;
  train)
    name=${2:?usage: $0 train NAME [VAR=VALUE...]}; shift 2; mkdir -p "$TRAIN"; rm -f "$TRAIN/$name.rc"
    if ! env "$@" bash -c '${PYTHON:-python3} -c "import jsonschema"' 2>/dev/null; then  # the offline image lacks it
      ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "$0: no jsonschema here and no wheels in $WHEELS: carry them (docs/gpu.md)" >&2; exit 2; }
      env "$@" bash -c '${PYTHON:-python3} -m pip install -q --no-index --no-deps --target "$1" "$2"/*.whl' _ "$TRAIN/site" "$WHEELS"
      export PYTHONPATH="$TRAIN/site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    # setsid: training outlives this call (a device call ends after 10 minutes); NAME.rc says when it is done
    setsid env "$@" bash -c 'models/train_broad.sh "$1"; echo $? > "$1.rc"' _ "$TRAIN/$name" > "$TRAIN/$name.log" 2>&1 < /dev/null &
    echo "training into $TRAIN/$name in the background (log $TRAIN/$name.log); then: $0 collect $name" ;;
  collect)
    name=${2:?usage: $0 collect NAME}
    [ -f "$TRAIN/$name.rc" ] || { tail -n 5 "$TRAIN/$name.log"; echo "$0: $name is still training" >&2; exit 3; }
    cp "$TRAIN/$name.log" "${OUT:-/tmp}/$name.log"
    [ ! -d "$TRAIN/$name" ] || tar cf - -C "$TRAIN" "$name" | split -b 15M -d - "${OUT:-/tmp}/$name.tar.part-"
    tail -n 3 "$TRAIN/$name.log"; ls -la "${OUT:-/tmp}/$name".*; exit "$(cat "$TRAIN/$name.rc")" ;;
  *) echo "usage: $0 receive DIR | install | models FILE | bench NAME SECONDS ARGS... | test NAME | queue FILE | wait SECONDS | train NAME [VAR=VALUE...] | collect NAME" >&2; exit 2 ;;
esac
