#!/usr/bin/env bash
# The GPU measurement kit: real costs of real shapes on a CUDA machine, offline, in one command.
#
#   bench/gpu/kit.sh prepare         # here, with PyPI: the trimmed llama.cpp source and the
#                                    # wheels the GPU machine lacks -> bench/gpu/carry/ (ignored)
#   bench/gpu/kit.sh run             # there: build, install, write models, measure -> $OUT
#   bench/gpu/kit.sh run --cpu       # the same on CPU with tiny shapes (how it is tested)
#   bench/gpu/kit.sh run --cpu --installed   # ... with the installed llama-cpp-python, no build
#   bench/gpu/kit.sh run --cpu --installed --native DIR   # ... and native tools built before
#   bench/gpu/kit.sh run --cpu --installed --offload      # tiny shapes on the installed build's
#                                    # GPU (the Vulkan build on lavapipe in the device tier)
#
# Everything slow is kept in $KIT_WORK (bench/gpu/.work, ignored) and reused by the next call
# while the machine stays up: the build (keyed by source and flags), the venv, the models,
# and the targets already measured. Each call stops starting new work after $KIT_SECONDS
# (default 540: a 10-minute command limit with room to spare). See bench/gpu/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
KIT=bench/gpu CARRY=bench/gpu/carry
WORK=$(realpath -m "${KIT_WORK:-$KIT/.work}")
OUT=$(realpath -m "${OUT:-$KIT/out}")
START=$(date +%s)
DEADLINE=$((START + ${KIT_SECONDS:-540}))
VERSION=$(sed -n 's/.*"llama-cpp-python==\([^"]*\)".*/\1/p' pyproject.toml)
SOURCE=$CARRY/llama-cpp-python-$VERSION-trimmed.tar.gz
say() { printf '[kit %4ss] %s\n' $(($(date +%s) - START)) "$*"; }
die() { echo "kit: $*" >&2; exit 1; }
left() { echo $((DEADLINE - $(date +%s))); }

prepare() {
    mkdir -p "$WORK" "$CARRY/wheels"
    local sdist=$WORK/llama_cpp_python-$VERSION.tar.gz
    [ -f "$sdist" ] || python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$WORK"
    python3 $KIT/trim.py "$sdist" "$WORK/trimmed"
    tar czf "$SOURCE" -C "$WORK/trimmed" .
    # specrun's dependencies and llama-cpp-python's, as wheels for the GPU machine's Python
    # (3.12; KIT_PYTHON=3.11 for a CPU run here).
    local PYVER=${KIT_PYTHON:-3.12}
    python3 - > "$CARRY/requirements.txt" <<'EOF'
import tomllib
pyproject = tomllib.load(open("pyproject.toml", "rb"))
deps = pyproject["project"]["dependencies"]
print("\n".join(d for d in deps if not d.startswith("llama-cpp-python")))
print("typing-extensions>=4.5\ndiskcache>=5.6.1\njinja2>=2.11.3")  # llama-cpp-python's own
print("\n".join(pyproject["build-system"]["requires"]))  # setup.py's, for specrun/core/_sampling.c
EOF
    python3 -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp --abi "cp${PYVER/./}" \
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        -r "$CARRY/requirements.txt" -d "$CARRY/wheels"
    du -shc "$SOURCE" "$CARRY/wheels"
    echo "carry it: run(command='bench/gpu/kit.sh run', carry=['$CARRY'])"
}

python_env() {  # sets PY and PYTHONPATH
    if [ "$INSTALLED" = 1 ]; then
        PY=${PYTHON:-.venv/bin/python}
        export PYTHONPATH=$PWD
        return
    fi
    [ -d "$CARRY/wheels" ] || die "no $CARRY/wheels: run 'bench/gpu/kit.sh prepare' where PyPI is reachable"
    if [ ! -x "$WORK/venv/bin/python" ]; then
        # The system's packages (numpy, torch, pip) stay visible; only what is missing is installed.
        python3 -m venv --system-site-packages --without-pip "$WORK/venv"
    fi
    PY=$WORK/venv/bin/python
    $PY -m pip install -q --no-index --find-links "$CARRY/wheels" -r "$CARRY/requirements.txt"
    # specrun's sampling in C, as `pip install` builds it (without it, numpy's runs)
    $PY setup.py -q build_ext --inplace > "$WORK/sampling-build.log" 2>&1 \
        || say "specrun/core/_sampling.c did not compile ($WORK/sampling-build.log): sampling runs in numpy"
    export PYTHONPATH=$WORK/site:$PWD
}

build() {  # llama.cpp's libraries for llama-cpp-python, and the native peers, from one source and one build
    [ -f "$SOURCE" ] || die "no $SOURCE: run 'bench/gpu/kit.sh prepare' where PyPI is reachable"
    local flags jobs arch=""
    flags=$(python3 specrun/llama/install.py --print | sed -n 's/^CMAKE_ARGS=//p')  # the CPU flags, AMX left out
    if [ "$CPU" = 0 ]; then
        [ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
        command -v nvcc > /dev/null || die "no nvcc: a CUDA toolkit is needed (or use --cpu)"
        arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
        [ -n "$arch" ] || die "nvidia-smi names no GPU"
        flags="$flags -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$arch"
    fi
    local key
    key=$( (sha256sum "$SOURCE" | cut -c1-16; echo "$flags") | sha256sum | cut -c1-16)
    BUILD=$WORK/build-$key
    if [ ! -f "$BUILD/done" ]; then
        jobs=$(nproc)
        say "building llama.cpp $VERSION (${arch:+CUDA sm_$arch, }$jobs jobs): $flags"
        rm -rf "$WORK/src" "$BUILD" && mkdir -p "$WORK/src"
        tar xzf "$SOURCE" -C "$WORK/src"
        local t0 generator=()
        t0=$(date +%s)
        command -v ninja > /dev/null && generator=(-G Ninja)
        # shellcheck disable=SC2086  # flags is a list of -D options
        cmake -S "$WORK/src/vendor/llama.cpp" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
            -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
            -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF $flags > "$WORK/cmake.log" 2>&1 \
            || { tail -20 "$WORK/cmake.log"; die "cmake failed (log: $WORK/cmake.log)"; }
        cmake --build "$BUILD" -j "$jobs" --target llama llama-completion llama-speculative-simple \
            > "$WORK/build.log" 2>&1 || { tail -20 "$WORK/build.log"; die "build failed (log: $WORK/build.log)"; }
        echo "$(($(date +%s) - t0)) s on $jobs cores${arch:+, CUDA sm_$arch}" > "$BUILD/done"
    fi
    BUILD_RECORD="$(cat "$BUILD/done")"
    say "build: $BUILD_RECORD"
    # llama-cpp-python as its wheel lays it out: the Python package with the libraries in lib/.
    rm -rf "$WORK/site" && mkdir -p "$WORK/site"
    tar xzf "$SOURCE" -C "$WORK/site" ./llama_cpp
    mkdir -p "$WORK/site/llama_cpp/lib"
    cp -P "$BUILD"/bin/lib*.so* "$WORK/site/llama_cpp/lib/"
    NATIVE=$BUILD/bin
}

model() {  # model SHAPE TYPE [--head eagle3 | --mtp | --block dflash] -> path, written once
    local variant=""
    case ${3:-} in
        --head | --block) variant=-$4 ;;  # an EAGLE-3 head or a block draft for a target of SHAPE
        --mtp) variant=-mtp ;;  # SHAPE as glm4moe with one MTP layer
    esac
    local path=$WORK/models/$1$variant-$2.gguf
    [ -f "$path" ] || $PY $KIT/synthetic.py "$1" "$2" "$path" "${@:3}" > /dev/null
    echo "$path"
}

measure() {  # measure NAME=PATH... (heads in HEADS: --head NAME=HEAD ..., block drafts in BLOCKS)
    local targets=()
    for spec in "$@"; do targets+=(--target "$spec"); done
    $PY $KIT/measure.py --draft "$DRAFT" "${targets[@]}" "${HEADS[@]}" "${BLOCKS[@]}" ${NATIVE:+--native "$NATIVE"} \
        --out "$OUT" --append --deadline $((DEADLINE - 60)) --build "$BUILD_RECORD" \
        --models-seconds "$MODELS_SECONDS" "${MEASURE_ARGS[@]}"
}

run() {
    CPU=0 INSTALLED=0 OFFLOAD=0 NATIVE="" BUILD_RECORD="installed llama-cpp-python, not built" MEASURE_ARGS=() HEADS=() BLOCKS=()
    local given_native=""
    while [ $# -gt 0 ]; do
        case $1 in
            --cpu) CPU=1 ;;
            --installed) INSTALLED=1 ;;
            --offload) OFFLOAD=1 ;;
            --native) [ $# -ge 2 ] || die "--native needs a folder"; given_native=$(realpath "$2"); shift ;;
            *) die "unknown option $1 (see bench/gpu/kit.sh)" ;;
        esac
        shift
    done
    [ "$INSTALLED" = 1 ] && [ "$CPU" = 0 ] && die "--installed goes with --cpu"
    [ "$OFFLOAD" = 1 ] && [ "$INSTALLED" = 0 ] && die "--offload goes with --cpu --installed"
    [ -z "$given_native" ] || [ "$INSTALLED" = 1 ] || die "--native goes with --installed (a build makes its own)"
    mkdir -p "$WORK/models" "$OUT"
    python_env
    [ "$INSTALLED" = 1 ] || build
    NATIVE=${given_native:-$NATIVE}
    local t0 head block targets
    t0=$(date +%s)
    # Each target beside the draft model, an EAGLE-3 head at F16 (as published) and a DFlash
    # draft at F16 (as z-lab's: 5 target layers, 5 layers, blocks of 16); its MTP twin (glm4moe,
    # one MTP layer) drafting with its own layer, before the F16 target.
    if [ "$CPU" = 1 ]; then
        DRAFT=$(model tiny-draft q4_0)
        head=$(model tiny-target f16 --head eagle3)
        block=$(model tiny-target f16 --block dflash)
        targets=("tiny-q4_k_m=$(model tiny-target q4_k_m)" "tiny-mtp-q4_k_m=$(model tiny-target q4_k_m --mtp)"
            "tiny-f16=$(model tiny-target f16)")
        HEADS=(--head "tiny-q4_k_m=$head" --head "tiny-f16=$head")
        BLOCKS=(--block "tiny-q4_k_m=$block" --block "tiny-f16=$block")
        MEASURE_ARGS=(--tokens 32 --prompt-words 8 --context 128 --widths 8)
        # The tiny shapes on the CPU, or with --offload every layer on the build's GPU. There the
        # EAGLE-3 head and the F16 target are left out: on lavapipe the head's stage corrupted
        # memory in ggml-vulkan (DESIGN.md, "Vulkan: what the device tier found").
        if [ "$OFFLOAD" = 1 ]; then
            targets=("${targets[@]:0:2}")
            HEADS=() BLOCKS=()
        else
            MEASURE_ARGS+=(--gpu-layers 0)
        fi
    else
        DRAFT=$(model llama3.2-1b q4_0)
        head=$(model llama3-8b f16 --head eagle3)
        block=$(model llama3-8b f16 --block dflash)
        targets=("8b-q4_k_m=$(model llama3-8b q4_k_m)" "8b-mtp-q4_k_m=$(model llama3-8b q4_k_m --mtp)"
            "8b-f16=$(model llama3-8b f16)")
        HEADS=(--head "8b-q4_k_m=$head" --head "8b-f16=$head")
        BLOCKS=(--block "8b-q4_k_m=$block" --block "8b-f16=$block")
    fi
    MODELS_SECONDS=$(($(date +%s) - t0))
    say "models ready in ${MODELS_SECONDS} s; measuring"
    measure "${targets[@]}"
    # How fast `specrun heads train` fits a head of the target's shape, where torch is installed.
    if $PY -c "import torch" 2> /dev/null; then
        local shape=8b seconds=45
        [ "$CPU" = 1 ] && shape=tiny seconds=3
        $PY $KIT/train_rate.py --shape $shape --seconds $seconds --out "$OUT" || say "the training rate failed"
    else
        say "no torch here: the training rate is not measured"
    fi
    # The 70B-shaped target (42 GB) and its head (with its own token embeddings, as published:
    # 4.9 GB) only with time to spare, in place of the 8B F16 and MTP targets and the 8B's
    # DFlash draft (disk is 64 GiB).
    if [ "$CPU" = 0 ] && [ "$(left)" -gt 300 ]; then
        rm -f "$WORK/models/llama3-8b-f16.gguf" "$WORK/models/llama3-8b-mtp-q4_k_m.gguf" "$WORK/models/llama3-8b-dflash-f16.gguf"
        t0=$(date +%s)
        targets=("70b-q4_k_m=$(model llama3-70b q4_k_m)")
        HEADS=(--head "70b-q4_k_m=$(model llama3-70b f16 --head eagle3)") BLOCKS=()
        MODELS_SECONDS=$(($(date +%s) - t0))
        measure "${targets[@]}"
    elif [ "$CPU" = 0 ]; then
        say "no time left for the 70B shape this call; run the same command again to measure it"
    fi
    say "results: $OUT/results.md"
}

case ${1:-} in
    prepare) prepare ;;
    run) shift; run "$@" ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
esac
