"""llama.cpp's staging API (`src/llama-ext.h`) that drafting from hidden states needs.

llama-ext.h declares its functions `LLAMA_API` but outside `extern "C"`, so the library
exports them under C++ mangled names, and llama-cpp-python binds none of them. The
name depends on the compiler's ABI, not on the build: Itanium (GCC and Clang, on Linux
and macOS) or MSVC (Windows). Each function here is declared once by its C++ signature
and bound by the name that signature mangles to under the platform's ABI, so a changed
signature in a later llama.cpp is a missing symbol, reported in one line, never a call
with the wrong arguments.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import llama_cpp as llama

from specrun.errors import SpecrunError

Abi = Literal["itanium", "msvc"]

# C++ type: (Itanium code, MSVC x64 code, ctypes type).
_TYPES: dict[str, tuple[str, str, Any]] = {
    "void": ("v", "X", None),
    "bool": ("b", "_N", ctypes.c_bool),
    "int32_t": ("i", "H", ctypes.c_int32),
    "uint32_t": ("j", "I", ctypes.c_uint32),
    "float *": ("Pf", "PEAM", ctypes.POINTER(ctypes.c_float)),
    "const int32_t *": ("PKi", "PEBH", ctypes.POINTER(ctypes.c_int32)),
    "llama_context *": ("P13llama_context", "PEAUllama_context@@", ctypes.c_void_p),
    "const llama_model *": ("PK11llama_model", "PEBUllama_model@@", ctypes.c_void_p),
}


@dataclass(frozen=True)
class Signature:
    """A free function's C++ declaration: `returns name(params)`."""

    name: str
    returns: str
    params: tuple[str, ...]

    def mangled(self, abi: Abi) -> str:
        if abi == "itanium":  # the return type of a plain function is not part of its name
            codes = "".join(_TYPES[p][0] for p in self.params) or "v"
            return f"_Z{len(self.name)}{self.name}{codes}"
        # MSVC names a repeated argument type of more than one character by its index
        # among those it has seen: f(bool, bool) is ?f@@YAX_N0@Z.
        seen: list[str] = []
        codes = ""
        for param in self.params:
            code = _TYPES[param][1]
            if len(code) > 1 and code in seen:
                code = str(seen.index(code))
            elif len(code) > 1:
                seen.append(code)
            codes += code
        return f"?{self.name}@@YA{_TYPES[self.returns][1]}{codes}{'@Z' if codes else 'XZ'}"


SIGNATURES = (
    Signature("llama_set_embeddings_nextn", "void", ("llama_context *", "bool", "bool")),
    Signature("llama_get_embeddings_nextn", "float *", ("llama_context *",)),
    Signature("llama_get_embeddings_nextn_ith", "float *", ("llama_context *", "int32_t")),
    Signature("llama_set_embeddings_layer_inp", "void", ("llama_context *", "uint32_t", "bool")),
    Signature("llama_get_embeddings_layer_inp", "float *", ("llama_context *", "uint32_t")),
    Signature("llama_model_target_layer_ids", "const int32_t *", ("const llama_model *",)),
    Signature("llama_model_target_layer_ids_n", "uint32_t", ("const llama_model *",)),
)


def platform_abi() -> Abi:
    return "msvc" if sys.platform == "win32" else "itanium"


@cache
def function(name: str) -> Any:  # noqa: ANN401 - a ctypes function, typed by its signature
    """The bound native function `name` of SIGNATURES, or a SpecrunError naming what lacks."""
    signature = next(s for s in SIGNATURES if s.name == name)
    symbol = signature.mangled(platform_abi())
    try:
        bound = getattr(llama.llama_cpp._lib, symbol)
    except AttributeError:
        raise SpecrunError(
            f"this llama.cpp build lacks {name} (looked up as {symbol}); drafting from hidden "
            f"states needs llama-cpp-python {llama.__version__} built from its own sources"
        ) from None
    bound.argtypes = [_TYPES[p][2] for p in signature.params]
    bound.restype = _TYPES[signature.returns][2]
    return bound


def target_layer_ids(model: int) -> tuple[int, ...]:
    """The target layers an EAGLE-3 head reads (`eagle3.target_layers`), or () for a model
    that is not a head."""
    count = function("llama_model_target_layer_ids_n")(model)
    ids = function("llama_model_target_layer_ids")(model)
    return tuple(ids[i] for i in range(count)) if count and ids else ()
