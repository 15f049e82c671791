#!/usr/bin/env bash
# specrun beside native llama.cpp, in one interleaved run: llama-completion (plain) and
# llama-speculative-simple (draft model; a DFlash or DSpark block draft with --block),
# built from the llama.cpp that the pinned llama-cpp-python sdist vendors, with the CMake
# flags specrun's own install uses. The native tools are built once in a scratch folder
# (--scratch), never in the repo.
#
#   bench/native_compare.sh [OPTIONS] [TARGET.gguf [DRAFT.gguf]]   (default: the demo pair)
#
#   --repeat N      interleaved repetitions; the median is shown (3)
#   --tokens N      tokens to generate (128)
#   --threads N     threads of every row (2)
#   --scratch DIR   where the native tools are built, once (/tmp/specrun-native)
#   --grammar FILE  constrain every row's answer to this GBNF grammar (--grammar-file natively)
#   --block FILE    also a block draft for TARGET (draft-dflash or draft-dspark, read from the
#                   file) against specrun -d dflash:FILE (dspark:), at the same fixed block
#                   length; the draft-model rows then run only where DRAFT.gguf is given
#   --block-gamma N the block rows' drafts a round: --spec-draft-n-max/-min N, --gamma N (7)
set -euo pipefail
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "native_compare.sh: $*" >&2; exit 2; }
REPEAT=3 TOKENS=128 THREADS=2 SCRATCH=/tmp/specrun-native GRAMMAR="" BLOCK="" BLOCK_GAMMA=7
while [ $# -gt 0 ]; do
    case $1 in
        --repeat | --tokens | --threads | --scratch | --grammar | --block | --block-gamma)
            [ $# -ge 2 ] || die "$1 needs a value"
            case $1 in
                --repeat) REPEAT=$2 ;;
                --tokens) TOKENS=$2 ;;
                --threads) THREADS=$2 ;;
                --scratch) SCRATCH=$2 ;;
                --grammar) GRAMMAR=$(realpath "$2") ;;
                --block) BLOCK=$(realpath -m "$2") ;;
                --block-gamma) BLOCK_GAMMA=$2 ;;
            esac
            shift 2 ;;
        -h | --help) usage; exit 0 ;;
        -*) die "unknown option $1 (--help lists them)" ;;
        *) break ;;
    esac
done
[ $# -le 2 ] || die "at most two models: TARGET.gguf [DRAFT.gguf]"
for number in "$REPEAT" "$TOKENS" "$THREADS" "$BLOCK_GAMMA"; do
    [[ $number =~ ^[1-9][0-9]*$ ]] || die "not a positive whole number: $number"
done
# Paths given are the caller's, from where it ran; the script works from the repository root.
SCRATCH=$(realpath -m "$SCRATCH")
MODELS=()
for model in "$@"; do MODELS+=("$(realpath -m "$model")"); done
cd "$(dirname "$0")/.."
PY=.venv/bin/python
read -r TARGET DRAFT < <($PY -c 'from specrun.models.demo import prepare_demo_pair; print(*prepare_demo_pair())')
TARGET=${MODELS[0]:-$TARGET} DRAFT=${MODELS[1]:-$DRAFT}
DRAFT_ROWS=1  # the draft model's rows: with --block, only where a draft model is given
if [ -n "$BLOCK" ] && [ ${#MODELS[@]} -eq 1 ]; then DRAFT_ROWS=0; fi
BLOCK_KIND=""
if [ -n "$BLOCK" ]; then
    [ -f "$BLOCK" ] || die "no block draft $BLOCK"
    # DSpark is DFlash with a Markov head: the file tells them apart, as specrun does.
    BLOCK_KIND=$($PY -c 'import sys; from specrun.llama.gguf import tensor_table
names = {name for name, _, _ in tensor_table(sys.argv[1])}
print("dspark" if "markov_w1.weight" in names else "dflash")' "$BLOCK")
fi
PROMPT="Once upon a time, in a small village by the sea, there lived"
NATIVE_GRAMMAR=() SPECRUN_GRAMMAR=()
if [ -n "$GRAMMAR" ]; then
    [ -f "$GRAMMAR" ] || die "no grammar file $GRAMMAR"
    NATIVE_GRAMMAR=(--grammar-file "$GRAMMAR") SPECRUN_GRAMMAR=(--grammar "$GRAMMAR")
    PROMPT="A JSON record of a cat, with its name, its age and its favourite toys:"
fi

VERSION=$($PY -c 'from specrun.llama.install import pinned_version; print(pinned_version())')
FLAGS=$($PY -m specrun.llama.install --print | sed -n 's/^CMAKE_ARGS=//p')
if [ ! -x "$SCRATCH/build/bin/llama-speculative-simple" ]; then
    mkdir -p "$SCRATCH" && cd "$SCRATCH"
    [ -d "llama_cpp_python-$VERSION" ] || {
        pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d .
        tar xzf "llama_cpp_python-$VERSION.tar.gz"
    }
    # shellcheck disable=SC2086  # FLAGS is a list of -D options
    cmake -S "llama_cpp_python-$VERSION/vendor/llama.cpp" -B build -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF $FLAGS > cmake.log
    cmake --build build -j "$(nproc)" --target llama-completion llama-speculative-simple > build.log
    cd - > /dev/null
fi
BIN=$SCRATCH/build/bin

# Wall time after the prompt, as specrun's figure and bench/side_by_side.py's: its total
# less its prompt eval (its eval time leaves out its own loop); an answer that ended early
# spent its last run on the end-of-generation token, which specrun does not count.
native_plain() { "$BIN/llama-completion" -m "$TARGET" -p "$PROMPT" -n "$TOKENS" --temp 0 -t "$THREADS" -no-cnv "${NATIVE_GRAMMAR[@]}" 2>&1 \
    | awk -v n="$TOKENS" -F= '/ prompt eval time =/ { prompt = $2 + 0 }
        / eval time =/ && !/prompt/ { split($2, after, "/"); runs = after[2] + 0 }
        / total time =/ { total = $2 + 0 }
        END { printf "%.1f\n", (runs < n - 1 ? runs - 1 : runs) / ((total - prompt) / 1000) }'; }
native_draft() { "$BIN/llama-speculative-simple" -m "$TARGET" -md "$DRAFT" --spec-type draft-simple -p "$PROMPT" -n "$TOKENS" --temp 0 \
    -t "$THREADS" "${NATIVE_GRAMMAR[@]}" 2>&1 | sed -n 's/.*speed: *\([0-9.]*\) t\/s.*/\1/p' | tail -1; }
specrun_rate() { .venv/bin/specrun run -t "$TARGET" --raw --temp 0 -n "$TOKENS" --threads "$THREADS" --json "${SPECRUN_GRAMMAR[@]}" "$@" \
    "$PROMPT" 2>/dev/null | $PY -c 'import json, sys; print(round(json.load(sys.stdin)["tokens_per_second"], 1))'; }
# The block rows: the rate and the share of drafts accepted, "RATE/ACCEPTED%"; the same drafts
# on both sides (greedy, no confidence cut-off) accept alike, so their rates compare rounds.
native_block() { "$BIN/llama-speculative-simple" -m "$TARGET" -md "$BLOCK" --spec-type "draft-$BLOCK_KIND" -p "$PROMPT" -n "$TOKENS" \
    --temp 0 -t "$THREADS" --spec-draft-n-max "$BLOCK_GAMMA" --spec-draft-n-min "$BLOCK_GAMMA" --spec-draft-p-min 0 "${NATIVE_GRAMMAR[@]}" 2>&1 \
    | awk '/speed:/ { sub(/.*speed: */, ""); rate = $1 + 0 } /accept += / { sub(/.*= */, ""); accepted = $1 + 0 }
        END { printf "%.1f/%.0f%%\n", rate, accepted }'; }
specrun_block() { .venv/bin/specrun run -t "$TARGET" -d "$BLOCK_KIND:$BLOCK" --gamma "$BLOCK_GAMMA" --p-min 0 --raw --temp 0 -n "$TOKENS" \
    --threads "$THREADS" --json "${SPECRUN_GRAMMAR[@]}" "$PROMPT" 2>/dev/null \
    | $PY -c 'import json, sys; r = json.load(sys.stdin); print("%.1f/%.0f%%" % (r["tokens_per_second"], 100 * (r["acceptance_rate"] or 0)))'; }

declare -A RATES
ROWS=("native plain" "specrun --gamma 0")
if [ "$DRAFT_ROWS" = 1 ]; then ROWS+=("native speculative-simple" "specrun -d DRAFT (auto)"); fi
NATIVE_BLOCK="native draft-$BLOCK_KIND γ=$BLOCK_GAMMA" SPECRUN_BLOCK="specrun -d $BLOCK_KIND: --gamma $BLOCK_GAMMA"
if [ -n "$BLOCK" ]; then ROWS+=("$NATIVE_BLOCK" "$SPECRUN_BLOCK"); fi
for _ in $(seq "$REPEAT"); do  # interleaved, so drift in the machine's speed hits every row alike
    RATES[native plain]+="$(native_plain) "
    RATES[specrun --gamma 0]+="$(specrun_rate --gamma 0) "
    if [ "$DRAFT_ROWS" = 1 ]; then
        RATES[native speculative-simple]+="$(native_draft) "
        RATES[specrun -d DRAFT (auto)]+="$(specrun_rate -d "$DRAFT") "
    fi
    if [ -n "$BLOCK" ]; then
        RATES[$NATIVE_BLOCK]+="$(native_block) "
        RATES[$SPECRUN_BLOCK]+="$(specrun_block) "
    fi
done
DRAFTS=""
if [ "$DRAFT_ROWS" = 1 ]; then DRAFTS=" + $DRAFT"; fi
DRAFTS+=${BLOCK:+ + $BLOCK ($BLOCK_KIND)}
echo "$TARGET$DRAFTS, $TOKENS tokens, greedy, $THREADS threads, median of $REPEAT${GRAMMAR:+, grammar $GRAMMAR}; flags: $FLAGS"
for row in "${ROWS[@]}"; do  # a block row's runs show RATE/ACCEPTED%
    printf '%-30s %s tok/s  (%s)\n' "$row" \
        "$($PY -c 'import statistics, sys; print(statistics.median(float(r.split("/")[0]) for r in sys.argv[1:]))' ${RATES[$row]})" \
        "${RATES[$row]% }"
done
