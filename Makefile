# Two entry points a new user needs: `make demo` (the main job on the embedded default) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast setup lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0  # the CPU wheel; an unpinned torch pulls a CUDA build
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/python -m components.sandbox.runtime >/dev/null  # the process sandbox's task runtime (runtime.lock)
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/medgym pipeline run --profile demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not docker"

lint: $(STAMP)
	$(BIN)/ruff check components flows tests bench

bench: $(STAMP)
	$(BIN)/python bench/sandbox.py
	$(BIN)/python bench/generate.py

clean:
	rm -rf data/demo data/smoke .state mlflow/mlruns.db mlflow/artifacts
