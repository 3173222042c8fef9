# `make help` lists the targets. Every target that needs Python bootstraps .venv first,
# so `make test` and `make phase2` work as the first command on a fresh clone.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.DEFAULT_GOAL := help

help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z0-9_-]+:.*## /{printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The first run installs torch, SGLang and Jupyter: several minutes, so every step
# says what it does and pip prints a line per package as it goes instead of running silently.
$(STAMP): pyproject.toml requirements/base.lock requirements/sglang-cpu.lock
	@echo "[venv 1/4] creating $(VENV) with $(PY)"
	@test -x $(VPY) || $(PY) -m venv $(VENV)
	@$(VPY) -m pip install -q --disable-pip-version-check "setuptools>=68" wheel
	@echo "[venv 2/4] installing $$(cat requirements/base.lock requirements/sglang-cpu.lock | grep -c '==') pinned packages (torch, SGLang and Jupyter among them: several minutes on a first run)"
	@$(VPY) -m pip install --disable-pip-version-check --no-deps -r requirements/base.lock -r requirements/sglang-cpu.lock
	@echo "[venv 3/4] installing this project (editable) and its SGLang plugin entry point"
	@$(VPY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	@echo "[venv 4/4] registering the Jupyter kernel python3 for the notebooks"
	@$(VPY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	@touch $@
	@echo "[venv] ready: $(VENV)"

venv: $(STAMP) ## create .venv and install the pinned dependencies (other targets do this for you)

# Two pytest workers, each taking whole modules (module-scoped fixtures such as tests/server's real
# SGLang server stay in one process): on CI's 2 cores the suite waits on servers and subprocesses
# about half the time, so two workers take it from ~14.5 to ~9.5 minutes. TEST_WORKERS=0 runs it serially.
TEST_WORKERS ?= 2

test: $(STAMP) ## run the whole test suite (no GPU; needs the CUDA toolkit's nvcc: it builds the kernel for every arch); TEST_WORKERS=n workers (default 2)
	$(VPY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test-sglang: $(STAMP) ## run the SGLang plugin tests only (CPU, real SGLang 0.5.23 classes, Triton interpreter)
	$(VPY) -m pytest -q tests/sglang

kernel-build: $(STAMP) ## compile the kernel for sm_80/86/89/90/120 into the cache (CACHE=dir: prebuild for a serving image) and print resource usage
	$(VPY) -m kernel.build --all-archs --report $(if $(CACHE),--cache-dir "$(CACHE)")

sglang-bundle: $(STAMP) ## build .sglang-site/: SGLang 0.5.23 and what it needs, for a GPU machine without it (PYTHONPATH=.sglang-site)
	$(VPY) -m kernel.sglang.device_bundle .sglang-site

sglang-server-bundle: $(STAMP) ## build .server-bundle/ (SGLang 0.5.23's server, the wheels it lacks on the GPU image, stand-ins, plugin entry point, prebuilt kernel; compressed) for `python -m kernel.sglang.real_server` there
	$(VPY) -m kernel.sglang.server_bundle .server-bundle

gpu-run: ## on a CUDA machine: build, validate, benchmark with its own python3; JSON into OUT=dir (default reports/data)
	PYTHONPATH=$(CURDIR) $(PY) -m kernel.gpu_run --out $${OUT:-reports/data}

guarantees: ## on a CUDA machine: the checks a kernel change must pass before it ships, side by side (needs .sglang-site: make sglang-bundle); JSON into OUT=dir
	PYTHONPATH=$(CURDIR):$(CURDIR)/.sglang-site $(PY) -m kernel.guarantees --out $${OUT:?set OUT=dir, the folder for the JSON}

phase0: $(STAMP) ## render reports/00_baseline.html (SGLang's verify path at MLA shapes) and the index
	$(VPY) -m notebooks.run phase0

phase1: $(STAMP) ## render reports/01_flash_decode.html (contiguous-cache kernel vs naive and baseline) and the index
	$(VPY) -m notebooks.run phase1

phase2: $(STAMP) ## main job: measure anew if a CUDA GPU is here (else use reports/data), render reports/02_paged_bf16.html and the index
	$(VPY) -m notebooks.run phase2 --measure auto

phase3: $(STAMP) ## canary A/B at 185k context (two local emulators unless CANDIDATE_URL and CONTROL_URL are set), render and index
	$(VPY) -m notebooks.run phase3 $(if $(CANDIDATE_URL)$(CONTROL_URL),-p candidate_url "$(CANDIDATE_URL)" -p control_url "$(CONTROL_URL)")

reports: $(STAMP) ## measure anew if a CUDA GPU is here, then render every phase report and reports/index.html
	$(VPY) -m notebooks.run all --measure auto

clean: ## remove build outputs (keeps .venv and reports/)
	rm -rf build .pytest_cache

.PHONY: help venv test test-sglang kernel-build sglang-bundle sglang-server-bundle gpu-run guarantees phase0 phase1 phase2 phase3 reports clean

# ---- rollout tool (rollout/, tests/rollout/) ----
INVENTORY ?= rollout/inventory.example.toml

rollout-plan: $(STAMP) ## dry run of canary + promote on INVENTORY (default the Kimi-K2 example); touches nothing
	$(VPY) -m rollout plan --inventory $(INVENTORY)

ROLLOUT_RESULTS ?= .rollout/demo

rollout-demo: $(STAMP) ## canary + promote over 3 local emulator groups modelled on reports/data; result into ROLLOUT_RESULTS (default .rollout/demo; ROLLOUT_RESULTS=reports/data to keep one)
	$(VPY) -m rollout.demo --data-dir reports/data --results-dir $(ROLLOUT_RESULTS)

rollout-test: $(STAMP) ## the rollout tool's tests alone: scenarios with real processes on 127.0.0.1 and SGLang's own logprob code (under 5 minutes)
	$(VPY) -m pytest -q tests/rollout

.PHONY: rollout-plan rollout-demo rollout-test
