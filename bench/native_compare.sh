#!/usr/bin/env bash
# specrun beside native llama.cpp, in one interleaved run: llama-completion (plain) and
# llama-speculative-simple (draft model), built from the llama.cpp that the pinned
# llama-cpp-python sdist vendors, with the CMake flags specrun's own install uses.
# The native tools are built once in a scratch folder (--scratch), never in the repo.
#
#   bench/native_compare.sh [OPTIONS] [TARGET.gguf [DRAFT.gguf]]   (default: the demo pair)
#
#   --repeat N      interleaved repetitions; the median is shown (3)
#   --tokens N      tokens to generate (128)
#   --threads N     threads of every row (2)
#   --scratch DIR   where the native tools are built, once (/tmp/specrun-native)
#   --grammar FILE  constrain every row's answer to this GBNF grammar (--grammar-file natively)
set -euo pipefail
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "native_compare.sh: $*" >&2; exit 2; }
REPEAT=3 TOKENS=128 THREADS=2 SCRATCH=/tmp/specrun-native GRAMMAR=""
while [ $# -gt 0 ]; do
    case $1 in
        --repeat | --tokens | --threads | --scratch | --grammar)
            [ $# -ge 2 ] || die "$1 needs a value"
            case $1 in
                --repeat) REPEAT=$2 ;;
                --tokens) TOKENS=$2 ;;
                --threads) THREADS=$2 ;;
                --scratch) SCRATCH=$2 ;;
                --grammar) GRAMMAR=$(realpath "$2") ;;
            esac
            shift 2 ;;
        -h | --help) usage; exit 0 ;;
        -*) die "unknown option $1 (--help lists them)" ;;
        *) break ;;
    esac
done
[ $# -le 2 ] || die "at most two models: TARGET.gguf [DRAFT.gguf]"
for number in "$REPEAT" "$TOKENS" "$THREADS"; do
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

declare -A RATES
for _ in $(seq "$REPEAT"); do  # interleaved, so drift in the machine's speed hits every row alike
    RATES[native plain]+="$(native_plain) "
    RATES[specrun --gamma 0]+="$(specrun_rate --gamma 0) "
    RATES[native speculative-simple]+="$(native_draft) "
    RATES[specrun -d DRAFT (auto)]+="$(specrun_rate -d "$DRAFT") "
done
echo "$TARGET + $DRAFT, $TOKENS tokens, greedy, $THREADS threads, median of $REPEAT${GRAMMAR:+, grammar $GRAMMAR}; flags: $FLAGS"
for row in "native plain" "specrun --gamma 0" "native speculative-simple" "specrun -d DRAFT (auto)"; do
    printf '%-28s %s tok/s  (%s)\n' "$row" \
        "$($PY -c 'import statistics, sys; print(statistics.median(map(float, sys.argv[1:])))' ${RATES[$row]})" \
        "${RATES[$row]% }"
done
