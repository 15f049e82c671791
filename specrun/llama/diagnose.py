"""Why llama.cpp refused a file, in one line: from its log, memory where it says so."""

from __future__ import annotations

import re

from specrun.errors import SpecrunError
from specrun.llama.native import log_lines

# What llama.cpp logs when memory runs out (CPU malloc, mmap, CUDA, Metal, Vulkan).
MEMORY_FAILURES = (
    "failed to allocate",
    "out of memory",
    "cannot allocate memory",
    "unable to allocate",
)


def load_failure(what: str) -> SpecrunError:
    """Why llama.cpp refused, from its log: memory when it says so, never 'corrupt' then."""
    lines = log_lines()
    memory = next((line for line in lines if any(m in line.lower() for m in MEMORY_FAILURES)), None)
    if memory is not None:
        size = re.search(r"size (?:of )?(\d+)", memory)
        amount = f" {int(size.group(1)) / 2**20:.0f} MiB" if size else " a buffer"
        return SpecrunError(
            f"{what}: not enough memory: llama.cpp could not allocate{amount} ({memory}); "
            "lower `gpu_layers` or `n_ctx`, or use a smaller model"
        )
    errors = [line for line in lines if "error" in line.lower() or "failed" in line.lower()]
    reason = (errors or lines or ["llama.cpp gave no reason"])[0]
    reason = reason.split(": ", 1)[-1] if reason.startswith(("llama_", "gguf_")) else reason
    return SpecrunError(f"{what}: the file is truncated, corrupt or unsupported ({reason})")
