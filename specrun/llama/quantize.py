"""Re-quantizing a GGUF with llama.cpp's own quantizer (the demo pair's Q4_0 draft)."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import llama_cpp as llama

from specrun.llama.diagnose import load_failure
from specrun.llama.gguf import check_gguf_header
from specrun.llama.native import set_verbose, verbose
from specrun.system.files import replaced_atomically

FILE_TYPES = {"F16": llama.LLAMA_FTYPE_MOSTLY_F16, "Q4_0": llama.LLAMA_FTYPE_MOSTLY_Q4_0}


def quantize(source: Path, destination: Path, file_type: str, threads: int | None = None) -> None:
    """Re-quantize a GGUF with llama.cpp's quantizer into `destination`, atomically: two
    processes making the same file at once both succeed."""
    check_gguf_header(source)
    set_verbose(verbose())
    params = llama.llama_model_quantize_default_params()
    params.ftype = FILE_TYPES[file_type]
    params.allow_requantize = True
    params.nthread = threads or os.cpu_count() or 1
    with replaced_atomically(destination) as partial:
        status = llama.llama_model_quantize(
            os.fsencode(source), os.fsencode(partial), ctypes.byref(params)
        )
        if status != 0:
            raise load_failure(f"quantizing {source.name} to {file_type} failed")
