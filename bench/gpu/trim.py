"""Cut the pinned llama-cpp-python sdist down to what the GPU kit builds and imports.

The sdist is 217 MB (vocab files, docs, every backend and tool); the kit's files must
travel in 64 MiB. Kept: the Python package `llama_cpp/`, and from the vendored llama.cpp
the CMake files, ggml with its CPU and CUDA backends, libllama, common, the vendored
third-party code, and the two native peers (`llama-completion`, `llama-speculative-simple`).
The tools/ and examples/ CMake lists are rewritten to name only those two.

    python bench/gpu/trim.py SDIST.tar.gz DEST
"""

from __future__ import annotations

import argparse
import shutil
import tarfile
from pathlib import Path, PurePosixPath

LLAMA = PurePosixPath("vendor/llama.cpp")
KEEP = [  # under the sdist's top folder
    "llama_cpp",
    "LICENSE.md",
    f"{LLAMA}/CMakeLists.txt",
    f"{LLAMA}/LICENSE",
    f"{LLAMA}/licenses",
    f"{LLAMA}/cmake",
    f"{LLAMA}/include",
    f"{LLAMA}/src",
    f"{LLAMA}/common",
    f"{LLAMA}/vendor",
    f"{LLAMA}/pocs",
    f"{LLAMA}/ggml/CMakeLists.txt",
    f"{LLAMA}/ggml/cmake",
    f"{LLAMA}/ggml/include",
    f"{LLAMA}/ggml/src/ggml-cpu",
    f"{LLAMA}/ggml/src/ggml-cuda",
    f"{LLAMA}/tools/completion",
    f"{LLAMA}/examples/speculative-simple",
]
GGML_SRC = LLAMA / "ggml/src"  # its own files are kept; of its backend folders only CPU and CUDA
REWRITTEN = {
    LLAMA / "tools/CMakeLists.txt": "add_subdirectory(completion)\n",
    LLAMA / "examples/CMakeLists.txt": "add_subdirectory(speculative-simple)\n",
}


def kept(path: PurePosixPath) -> bool:
    if any(path == PurePosixPath(k) or PurePosixPath(k) in path.parents for k in KEEP):
        return True
    return path.parent == GGML_SRC  # ggml's core sources and its CMakeLists.txt


def trim(sdist: Path, dest: Path) -> int:
    """Extract the kept files of `sdist` into `dest` (replaced); return their total size."""
    if dest.exists():
        shutil.rmtree(dest)
    total = 0
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            parts = PurePosixPath(member.name).parts
            if len(parts) < 2 or not member.isfile():
                continue
            relative = PurePosixPath(*parts[1:])
            if not kept(relative):
                continue
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.extractfile(member) as source, open(target, "wb") as out:  # type: ignore[union-attr]
                shutil.copyfileobj(source, out)
            target.chmod(member.mode & 0o777 | 0o600)
            total += member.size
    for relative, text in REWRITTEN.items():
        path = dest / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# Trimmed by specrun's bench/gpu/trim.py: only the native peers.\n" + text)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "sdist", type=Path, metavar="SDIST.tar.gz", help="the llama-cpp-python sdist"
    )
    parser.add_argument("dest", type=Path, metavar="DEST", help="the folder to fill (replaced)")
    args = parser.parse_args()
    size = trim(args.sdist, args.dest)
    print(f"{args.dest}: {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
