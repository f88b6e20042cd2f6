# Two entry points (see README): `make demo` and `make test`. Each creates .venv and installs what it needs.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP_QUIET ?= -q

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install $(PIP_QUIET) --upgrade pip

.PHONY: install install-dev runtime demo test lint typecheck unit bench bench-report
install: $(BIN)/python
	$(BIN)/pip install $(PIP_QUIET) -e .

install-dev: $(BIN)/python
	$(BIN)/pip install $(PIP_QUIET) -e ".[dev,runtime,hf,distributed]"

# The runtime (torch) and the transformers models, for `python -m nspsim_runtime.*` after `make demo`.
# TORCH_INDEX is where pip also looks for torch: the public index gives Linux the multi-GB CUDA build;
# a CPU-only machine wants `make runtime TORCH_INDEX=https://download.pytorch.org/whl/cpu`.
TORCH_INDEX ?=
runtime: install
	$(BIN)/pip install $(PIP_QUIET) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) -e ".[runtime,hf]"

# Main job: a strategy comparison on the built-in default, with an HTML report.
demo: install
	$(BIN)/nspsim compare -o out/report.html

# ruff lint and format check over the whole tree (config in pyproject.toml).
lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy strict over nspsim and runtime (runtime needs torch: the runtime extra).
typecheck:
	$(BIN)/mypy

unit:
	$(BIN)/pytest -n 2 -m "not benchmark and not gpu" --timeout 600

# The test command: install, lint, type-check nspsim and runtime, run the default test tiers.
test: install-dev
	$(MAKE) lint typecheck unit

bench: install-dev
	$(BIN)/pytest benchmarks -m benchmark --benchmark-only -p no:xdist

# Rewrite the measured tables in benchmarks/results/ (planner latency/Load/optimality, simulator speed,
# issue 26's speed figures with the Figure 7 sweep cold and warm). Needs a quiet machine: tens of minutes.
bench-report: install-dev
	$(BIN)/python benchmarks/planner_report.py
	$(BIN)/python benchmarks/simulator_report.py
	$(BIN)/python benchmarks/speed_report.py --fig7
