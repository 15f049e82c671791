#!/usr/bin/env bash
# The comparisons reported in the project's notes, on the embedded SmolLM2-135M pair.
# Run from the repository root after `make demo`; results land in bench/results/.
# Keep the machine otherwise idle: these are timings.
#
#   bench/run.sh [--repeat N]   (N: each benchmark's repetitions, 3)
set -euo pipefail
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "run.sh: $*" >&2; exit 2; }
repeat=3
while [ $# -gt 0 ]; do
    case $1 in
        --repeat) [ $# -ge 2 ] || die "--repeat needs a value"; repeat=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) die "unknown argument $1 (--help)" ;;
    esac
done
cd "$(dirname "$0")/.."
specrun=.venv/bin/specrun
out=bench/results
mkdir -p "$out"
target=$(.venv/bin/python -c "from specrun.models.demo import prepare_demo_pair; print(prepare_demo_pair()[0])")
draft=$(.venv/bin/python -c "from specrun.models.demo import prepare_demo_pair; print(prepare_demo_pair()[1])")

# 1. The demo pair (F16 target, Q4_0 draft) on the built-in prompts: every mode.
$specrun bench -t "$target" -d "$draft" --repeat "$repeat" --json "$out/demo.json" | tee "$out/demo.txt"

# 2. A pair where speculation cannot pay: the F16 target drafting for itself.
$specrun bench -t "$target" -d "$target" --no-lookup --repeat "$repeat" --json "$out/same-model.json" \
    | tee "$out/same-model.txt"

# 3. Code-editing and extraction prompts: plain, the draft model, prompt lookup and the hybrid.
$specrun bench -t "$target" -d "$draft" --prompts bench/prompts/extraction.jsonl --modes auto,lookup,hybrid \
    --repeat "$repeat" --json "$out/extraction.json" | tee "$out/extraction.txt"
