"""Imported first in a subprocess, this makes it a Mac with Apple silicon as far as specrun
can tell: `platform` says Darwin on arm64, and ggml's registry holds a Metal backend with
one GPU ("MTL0", an Apple M2 Pro with 21.47 GB for the GPU, 20 GB of it free), registered
through ggml's own `ggml_backend_register` with the structs of ggml-backend-impl.h.

Only what a report reads is there (names, type, memory): nothing may load a model on it.
"""

from __future__ import annotations

import ctypes
import platform

from llama_cpp._ggml import libggml

FREE, TOTAL = 20_000_000_000, 21_474_836_480
GGML_BACKEND_API_VERSION = 2
GPU = 1  # enum ggml_backend_dev_type

platform.system = lambda: "Darwin"
platform.machine = lambda: "arm64"

P, F = ctypes.c_void_p, ctypes.CFUNCTYPE
SIZE = ctypes.POINTER(ctypes.c_size_t)


class DeviceInterface(ctypes.Structure):
    _fields_ = [
        (name, P)
        for name in (
            "get_name", "get_description", "get_memory", "get_type", "get_props", "init_backend",
            "get_buffer_type", "get_host_buffer_type", "buffer_from_host_ptr", "supports_op",
            "supports_buft", "offload_op", "event_new", "event_free", "event_synchronize",
        )
    ]  # fmt: skip


class Device(ctypes.Structure):
    _fields_ = [("iface", DeviceInterface), ("reg", P), ("context", P)]


class RegistryInterface(ctypes.Structure):
    _fields_ = [(n, P) for n in ("get_name", "get_device_count", "get_device", "get_proc_address")]


class Registry(ctypes.Structure):
    _fields_ = [("api_version", ctypes.c_int), ("iface", RegistryInterface), ("context", P)]


_TEXTS = [ctypes.create_string_buffer(text) for text in (b"MTL", b"MTL0", b"Apple M2 Pro")]


def _text(index: int) -> ctypes._CFuncPtr:
    return F(P, P)(lambda _handle: ctypes.addressof(_TEXTS[index]))


def _memory(_device: int, free: ctypes._Pointer, total: ctypes._Pointer) -> None:
    free[0], total[0] = FREE, TOTAL


# Kept alive here: ggml holds only the pointers.
_DEVICE_FUNCTIONS = [
    _text(1),
    _text(2),
    F(None, P, SIZE, SIZE)(_memory),
    F(ctypes.c_int, P)(lambda _d: GPU),
]
_REGISTRY_FUNCTIONS = [
    _text(0),
    F(ctypes.c_size_t, P)(lambda _r: 1),
    F(P, P, ctypes.c_size_t)(lambda _r, _i: ctypes.addressof(_device)),
    F(P, P, ctypes.c_char_p)(lambda _r, _name: None),
]
_registry = Registry(
    GGML_BACKEND_API_VERSION, RegistryInterface(*(ctypes.cast(f, P) for f in _REGISTRY_FUNCTIONS))
)
_device = Device(
    DeviceInterface(*(ctypes.cast(f, P) for f in _DEVICE_FUNCTIONS)), ctypes.addressof(_registry)
)
libggml.ggml_backend_register.argtypes = [P]
libggml.ggml_backend_register(ctypes.addressof(_registry))
