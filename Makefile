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

$(STAMP): pyproject.toml requirements/base.lock requirements/sglang-cpu.lock
	@test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check "setuptools>=68" wheel
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps -r requirements/base.lock -r requirements/sglang-cpu.lock
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(VPY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	@touch $@

venv: $(STAMP) ## create .venv and install the pinned dependencies (other targets do this for you)

test: $(STAMP) ## run the whole test suite (CPU; builds the CUDA kernel for every target arch with nvcc)
	$(VPY) -m pytest -q

kernel-build: $(STAMP) ## compile the CUDA kernel for sm_80/86/89/90/120 into the build cache and print resource usage
	$(VPY) -m kernel.build --all-archs --report

gpu-run: ## on a CUDA machine: build, validate, benchmark; JSON into $$OUT (default reports/data)
	PYTHONPATH=$(CURDIR) $(PY) -m kernel.gpu_run --out $${OUT:-reports/data}

clean: ## remove build outputs (keeps .venv and reports/)
	rm -rf build .pytest_cache

.PHONY: help venv test kernel-build gpu-run clean

# ---- rollout tool (rollout/, tests/rollout/) ----
INVENTORY ?= rollout/inventory.example.toml

rollout-plan: $(STAMP) ## dry run of canary + promote on INVENTORY (default the Kimi-K2 example); touches nothing
	$(VPY) -m rollout plan --inventory $(INVENTORY)

rollout-demo: $(STAMP) ## canary + promote over 3 local emulator groups modelled on reports/data; writes reports/data/rollout-<id>.json
	$(VPY) -m rollout.demo --data-dir reports/data --results-dir reports/data

rollout-test: $(STAMP) ## the rollout tool's tests alone (real processes on 127.0.0.1, under 3 minutes)
	$(VPY) -m pytest -q tests/rollout

.PHONY: rollout-plan rollout-demo rollout-test
