#!/usr/bin/env bash
# The comparisons reported in the project's notes, on the embedded SmolLM2-135M pair.
# Run from the repository root after `make demo`; results land in bench/results/.
# Keep the machine otherwise idle: these are timings.
set -euo pipefail
cd "$(dirname "$0")/.."
specrun=.venv/bin/specrun
out=bench/results
mkdir -p "$out"
target=$(.venv/bin/python -c "from specrun.models.demo import prepare_demo_pair; print(prepare_demo_pair()[0])")
draft=$(.venv/bin/python -c "from specrun.models.demo import prepare_demo_pair; print(prepare_demo_pair()[1])")
repeat=${REPEAT:-3}

# 1. The demo pair (F16 target, Q4_0 draft) on the built-in prompts: every mode.
$specrun bench -t "$target" -d "$draft" --repeat "$repeat" --json "$out/demo.json" | tee "$out/demo.txt"

# 2. A pair where speculation cannot pay: the F16 target drafting for itself.
$specrun bench -t "$target" -d "$target" --no-lookup --repeat "$repeat" --json "$out/same-model.json" \
    | tee "$out/same-model.txt"

# 3. Code-editing and extraction prompts: plain, the draft model, prompt lookup and the hybrid.
$specrun bench -t "$target" -d "$draft" --prompts bench/prompts/extraction.jsonl --modes auto,lookup,hybrid \
    --repeat "$repeat" --json "$out/extraction.json" | tee "$out/extraction.txt"
