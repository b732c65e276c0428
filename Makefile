# One task runner for people and CI. `make demo` and `make test` do all set-up themselves.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
STATIC  := src/tunescope/server/static/index.html
WEB_SRC := $(shell find web/src -type f 2>/dev/null) web/openapi.json web/package.json \
           web/package-lock.json web/build.mjs web/types.mjs web/tsconfig.json

.PHONY: setup web web-test openapi browser demo test lint format bench bench-peers bench-sampler gpu-check screenshot dist clean

setup: $(STAMP) $(STATIC)

# torch 2.13.0 first: the CPU build on this disk. The package itself only asks torch>=2.1.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,server,prometheus,otel,postgres,clickhouse,gpu,torch,lightning,hf,optuna,ray,mlflow,wandb,tensorboard,demo,pandas,serve]'
	touch $(STAMP)

# The page's build needs Node only: its API types come from web/openapi.json, which is committed
# (`make openapi` writes it from the app; tests/test_web_openapi.py fails while it is stale).
web: $(STATIC)
$(STATIC): $(WEB_SRC)
	cd web && npm ci --no-audit --no-fund --loglevel=error && npm run build

# The page's unit tests (node --test on its modules without a DOM; web/test/).
web-test: $(STATIC)
	cd web && npm test

openapi: $(STAMP)
	$(BIN)/python -m tunescope.server._openapi web/openapi.json

# The sdist and wheel in dist/, both carrying the built page (hatch_build.py refuses to build
# without it). build makes the wheel from the sdist, as pip does from an index.
dist: $(STAMP) $(STATIC)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# Debian's packages the tests drive for real: Chromium for the browser tests (Playwright
# cannot download browsers here), Prometheus for the scrape test, openssl for the TLS tests.
SYSTEM_TOOLS := /usr/bin/chromium /usr/bin/prometheus /usr/bin/openssl
browser:
	@for f in $(SYSTEM_TOOLS); do test -x $$f || missing=1; done; \
	  if [ -n "$$missing" ]; then apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium prometheus openssl >/dev/null; fi

# On a machine with an NVIDIA GPU: known workloads (idle, matmul, memcpy, 10 GiB, two processes)
# run under tunescope and checked against nvidia-smi and torch, table printed, exit 1 when out
# of tolerance; the NVML readings are saved as replay files in bench/out/gpu_check/. Without a
# GPU it says so and succeeds.
gpu-check: $(STAMP)
	$(BIN)/python bench/gpu_check.py

demo: setup
	$(BIN)/tunescope demo

test: setup browser web-test
	$(BIN)/pytest -q

lint: setup
	$(BIN)/ruff check src tests bench hatch_build.py
	$(BIN)/ruff format --check src tests bench hatch_build.py
	$(BIN)/mypy

# The developer's loop: ruff, mypy and the fast tests, in a light venv (.venv-check) without
# torch or the other ML libraries; mypy keeps its incremental cache in that venv. The fast
# tests are the files below: they start no process of their own (no sampler, server, CLI
# subprocess or database server) and take a few seconds each. Tests marked ml, slow, browser,
# faults or postgres, and every other file, are left to make test.
CHECK_VENV   := .venv-check
CHECK_BIN    := $(CHECK_VENV)/bin
CHECK_STAMP  := $(CHECK_VENV)/.installed
CHECK_EXTRAS := dev,server,prometheus,otel,postgres,gpu,pandas
CHECK_MARKS  := not ml and not slow and not browser and not faults and not postgres
CHECK_TESTS  := $(addprefix tests/test_,$(addsuffix .py,imports docs exported_members \
	api_docs api_errors api_findings kept store_schema store_damage store_writer \
	store_projects store_contract_agrees findings_rules findings_model cli_format record_watch))

.PHONY: check clean-check
clean: clean-check
clean-check:
	rm -rf $(CHECK_VENV)

$(CHECK_STAMP): pyproject.toml
	test -x $(CHECK_BIN)/python || $(PY) -m venv $(CHECK_VENV)
	$(CHECK_BIN)/pip install -q --upgrade pip
	$(CHECK_BIN)/pip install -q -e '.[$(CHECK_EXTRAS)]'
	touch $(CHECK_STAMP)

check: $(CHECK_STAMP)
	$(CHECK_BIN)/ruff check src tests bench hatch_build.py
	$(CHECK_BIN)/ruff format --check src tests bench hatch_build.py
	$(CHECK_BIN)/mypy --cache-dir $(CHECK_VENV)/mypy_cache
	$(CHECK_BIN)/pytest -q -m '$(CHECK_MARKS)' $(CHECK_TESTS)

format: setup
	$(BIN)/ruff format src tests bench hatch_build.py
	$(BIN)/ruff check --fix src tests bench hatch_build.py

# the README's picture, from a real demo run, and docs/serving.md's, from a real llama.cpp
# sweep (tests write theirs to a temporary folder)
screenshot: setup browser
	TUNESCOPE_SCREENSHOTS=docs/img $(BIN)/pytest -q tests/test_browser_demo.py -k readme_screenshot
	TUNESCOPE_SCREENSHOTS=docs/img $(BIN)/pytest -q tests/test_serving_load.py -k serving_tab

bench: setup browser
	$(BIN)/python bench/run.py

# tunescope beside W&B (offline) and MLflow (local store), three workloads in rounds, in a
# venv of its own (bench/.venv-peers: the full mlflow, not the main venv's mlflow-skinny).
# Prints a side-by-side table and writes docs/performance.md from it.
PEERS_VENV  := bench/.venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed

$(PEERS_STAMP): pyproject.toml
	test -x $(PEERS_VENV)/bin/python || $(PY) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install -q --upgrade pip
	$(PEERS_VENV)/bin/pip install -q torch==2.13.0
	$(PEERS_VENV)/bin/pip install -q -e . wandb mlflow psutil
	touch $(PEERS_STAMP)

bench-peers: $(PEERS_STAMP)
	$(PEERS_VENV)/bin/python bench/bench_peers.py --write-docs

# the sampler's own CPU (1, 16, 64 processes, 8 replayed GPUs, 0.1 s, multi-GiB PSS) and its
# first-sample latency, beside the sampler of main (bench/bench_sampler.py --compare main)
bench-sampler: setup
	$(BIN)/python bench/run.py sampler

clean:
	rm -rf $(VENV) web/node_modules web/.test-out web/src/api-types.ts src/tunescope/server/static \
	  bench/out dist
