# Two entry points (README): `make demo` runs the example end to end, `make test` runs ruff and
# mypy (`make lint`) and then the tests.
# Each creates the virtual environment .venv when it is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXAMPLE ?= examples/pretrain_llama_tiny_ptd.sh

.PHONY: demo test lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch pinned first: the CPU wheel on disk; an unpinned torch pulls a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[profile,test]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/tinker-opt all $(EXAMPLE) --config-path examples/config.json

# The tests start with the linter: ruff's checks and its formatter in check mode.
test: $(VENV)/.installed lint
	$(PY) -m pytest -n 2

# Lint: ruff's checks, its formatter in check mode and the type checker (mypy, basic mode), all
# configured in pyproject.toml.
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) profiled_data results
