"""What the loaded llama.cpp build can do, read from ggml's backend registry.

The backends compiled in (CPU, CUDA, Metal, Vulkan, RPC, ...), the CPU features it was
built for, its extra weight buffer types (AMX, REPACK), and the devices it sees with
their memory. `runtime` uses it to keep weights off AMX; `doctor` and the front ends
use it to say where the models run.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, TypedDict, cast

import llama_cpp as llama
from llama_cpp._ggml import libggml

from specrun.llama.native import start_backend

# A device's kind: enum ggml_backend_dev_type as users read it, "other" for a newer value.
DeviceKind = Literal["CPU", "GPU", "iGPU", "accelerator", "meta", "other"]
DEVICE_TYPES: dict[int, DeviceKind] = {0: "CPU", 1: "GPU", 2: "iGPU", 3: "accelerator", 4: "meta"}
# Registry names as ggml spells them -> as users know them ("MTL" is Metal).
BACKEND_NAMES = {
    "MTL": "Metal",
    "METAL": "Metal",
    "CUDA": "CUDA",
    "VULKAN": "Vulkan",
    "HIP": "ROCm",
    "ROCM": "ROCm",
    "SYCL": "SYCL",
    "RPC": "RPC",
    "BLAS": "BLAS",
    "CPU": "CPU",
    "OPENCL": "OpenCL",
    "CANN": "CANN",
    "MUSA": "MUSA",
}
AMX_ENV = "SPECRUN_AMX"  # "1": let llama.cpp put weights on its AMX buffer type


class _Feature(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_char_p)]


_GetFeatures = ctypes.CFUNCTYPE(ctypes.POINTER(_Feature), ctypes.c_void_p)
_GetExtraBufts = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


def _bind(name: str, restype: type | None, *argtypes: type) -> Callable[..., Any]:
    """ggml's function `name` through ctypes, which types nothing: each binding below declares
    the signature ctypes gives it (c_void_p as int, NULL as None; c_char_p as bytes)."""
    function = getattr(libggml, name)
    function.restype, function.argtypes = restype, list(argtypes)
    return cast("Callable[..., Any]", function)


# A ggml object (registry, device, buffer type, function) is its address; NULL is None.
Handle = int

_reg_count: Callable[[], int] = _bind("ggml_backend_reg_count", ctypes.c_size_t)
_reg_get: Callable[[int], Handle] = _bind("ggml_backend_reg_get", ctypes.c_void_p, ctypes.c_size_t)
_reg_name: Callable[[Handle], bytes | None] = _bind(
    "ggml_backend_reg_name", ctypes.c_char_p, ctypes.c_void_p
)
_reg_proc: Callable[[Handle, bytes], Handle | None] = _bind(
    "ggml_backend_reg_get_proc_address", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p
)
_dev_count: Callable[[], int] = _bind("ggml_backend_dev_count", ctypes.c_size_t)
_dev_get: Callable[[int], Handle] = _bind("ggml_backend_dev_get", ctypes.c_void_p, ctypes.c_size_t)
_dev_name: Callable[[Handle], bytes | None] = _bind(
    "ggml_backend_dev_name", ctypes.c_char_p, ctypes.c_void_p
)
_dev_description: Callable[[Handle], bytes | None] = _bind(
    "ggml_backend_dev_description", ctypes.c_char_p, ctypes.c_void_p
)
_dev_type: Callable[[Handle], int] = _bind("ggml_backend_dev_type", ctypes.c_int, ctypes.c_void_p)
_dev_memory: Callable[[Handle, ctypes._CArgObject, ctypes._CArgObject], None] = _bind(
    "ggml_backend_dev_memory",
    None,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_size_t),
    ctypes.POINTER(ctypes.c_size_t),
)
_dev_reg: Callable[[Handle], Handle] = _bind(
    "ggml_backend_dev_backend_reg", ctypes.c_void_p, ctypes.c_void_p
)
_dev_by_type: Callable[[int], Handle | None] = _bind(
    "ggml_backend_dev_by_type", ctypes.c_void_p, ctypes.c_int
)
_dev_by_name: Callable[[bytes], Handle | None] = _bind(
    "ggml_backend_dev_by_name", ctypes.c_void_p, ctypes.c_char_p
)
_reg_by_name: Callable[[bytes], Handle | None] = _bind(
    "ggml_backend_reg_by_name", ctypes.c_void_p, ctypes.c_char_p
)
_reg_dev_count: Callable[[Handle], int] = _bind(
    "ggml_backend_reg_dev_count", ctypes.c_size_t, ctypes.c_void_p
)
_reg_dev_get: Callable[[Handle, int], Handle] = _bind(
    "ggml_backend_reg_dev_get", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t
)
_buft_name: Callable[[Handle], bytes | None] = _bind(
    "ggml_backend_buft_name", ctypes.c_char_p, ctypes.c_void_p
)


def _text(value: bytes | None) -> str:
    return (value or b"").decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Device:
    name: str  # llama.cpp's name, e.g. "CUDA0", "MTL0", "CPU"
    description: str  # e.g. "NVIDIA GeForce RTX 4090"
    kind: DeviceKind
    backend: str  # "CUDA", "Metal", ... as users call it
    free_bytes: int
    total_bytes: int


class BuildRecord(TypedDict):
    """`BuildInfo.as_dict()`: the build in `specrun doctor --json`."""

    version: str
    backends: list[str]
    cpu_features: list[str]
    extra_buffer_types: list[str]
    amx: bool


@dataclass(frozen=True)
class BuildInfo:
    version: str  # llama-cpp-python's
    backends: tuple[str, ...]  # as users call them: "CPU", "CUDA", "Metal", "RPC", ...
    cpu_features: tuple[str, ...]  # what the CPU backend was compiled for: "AVX2", "AMX_INT8", ...
    extra_buffer_types: tuple[str, ...]  # the CPU's weight layouts: "AMX", "CPU_REPACK", ...

    @property
    def gpu_backends(self) -> tuple[str, ...]:
        return tuple(b for b in self.backends if b not in ("CPU", "BLAS", "RPC"))

    @property
    def has_amx(self) -> bool:
        return "AMX" in self.extra_buffer_types

    def as_dict(self) -> BuildRecord:
        return {
            "version": self.version,
            "backends": list(self.backends),
            "cpu_features": list(self.cpu_features),
            "extra_buffer_types": list(self.extra_buffer_types),
            "amx": self.has_amx,
        }


def backend_name(registry_name: str) -> str:
    return BACKEND_NAMES.get(registry_name.upper(), registry_name)


def _registries() -> list[int]:
    return [_reg_get(i) for i in range(_reg_count())]


@lru_cache(maxsize=1)
def build_info() -> BuildInfo:
    start_backend()
    backends: list[str] = []
    features: list[str] = []
    for reg in _registries():
        name = _text(_reg_name(reg))
        backends.append(backend_name(name))
        address = _reg_proc(reg, b"ggml_backend_get_features")
        if name.upper() == "CPU" and address:
            array: ctypes._Pointer[_Feature] = _GetFeatures(address)(reg)
            i = 0
            while array and array[i].name:
                if _text(array[i].value) not in ("0", ""):
                    features.append(_text(array[i].name))
                i += 1
    return BuildInfo(llama.__version__, tuple(backends), tuple(features), _extra_buffer_types())


def _cpu_extra_bufts() -> list[int]:
    """The CPU backend's extra buffer types, in the order llama.cpp tries them for a weight."""
    cpu = _dev_by_type(0)
    if not cpu:
        return []
    address = _reg_proc(_dev_reg(cpu), b"ggml_backend_dev_get_extra_bufts")
    if not address:
        return []
    array: ctypes._Pointer[ctypes.c_void_p] = _GetExtraBufts(address)(cpu)
    bufts: list[Handle] = []
    i = 0
    while array and array[i]:
        bufts.append(array[i])
        i += 1
    return bufts


def _extra_buffer_types() -> tuple[str, ...]:
    return tuple(_text(_buft_name(buft)) for buft in _cpu_extra_bufts())


def describe(dev: int) -> Device:
    """One device by its ggml handle, with its free and total memory now."""
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    _dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    return Device(
        name=_text(_dev_name(dev)),
        description=_text(_dev_description(dev)).strip(),
        kind=DEVICE_TYPES.get(_dev_type(dev), "other"),
        backend=backend_name(_text(_reg_name(_dev_reg(dev)))),
        free_bytes=free.value,
        total_bytes=total.value,
    )


def _handles() -> list[int]:
    start_backend()
    return [_dev_get(i) for i in range(_dev_count())]


def devices() -> list[Device]:
    """Every device llama.cpp sees, with its free and total memory now."""
    return [describe(dev) for dev in _handles()]


def gpu_handles() -> list[int]:
    """The handles of this machine's GPUs, in llama.cpp's order: for a model's own list of
    devices."""
    return [dev for dev in _handles() if DEVICE_TYPES.get(_dev_type(dev)) in ("GPU", "iGPU")]


def gpu_devices() -> list[Device]:
    return [describe(dev) for dev in gpu_handles()]


def device_handle(name: str) -> int | None:
    """A local device by llama.cpp's name for it ("CPU", "CUDA0"); None where there is none."""
    start_backend()
    return _dev_by_name(name.encode()) or None


def backend_function(registry: str, name: str) -> int | None:
    """The address of a function a backend exports through its registry (RPC's server, say)."""
    start_backend()
    reg = _reg_by_name(registry.encode())
    return (_reg_proc(reg, name.encode()) or None) if reg else None


def registry_devices(reg: int) -> list[int]:
    """The device handles of a registry that is not in ggml's list (an RPC server's)."""
    return [_reg_dev_get(reg, i) for i in range(_reg_dev_count(reg))]


def shares_host_memory(device: Device) -> bool:
    """Whether a GPU's memory is the system's: an integrated GPU, or Metal on Apple silicon
    (Intel Macs' Metal GPUs have their own)."""
    apple_silicon = platform.system() == "Darwin" and platform.machine() == "arm64"
    return device.kind == "iGPU" or (device.backend == "Metal" and apple_silicon)


def gpu_free_bytes() -> int:
    """Free memory over all GPUs now (0 without any)."""
    return sum(d.free_bytes for d in gpu_devices())


def system_memory_available() -> int:
    """Bytes the system can give without swapping: MemAvailable, else the CPU device's free
    memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return next((d.free_bytes for d in devices() if d.kind == "CPU"), 0)


def accelerator_name(build: BuildInfo | None = None) -> str:
    """The GPU backend models run on ('CUDA', 'Metal', 'Vulkan', ...), else 'CPU'."""
    gpu = (build or build_info()).gpu_backends
    return gpu[0] if gpu else "CPU"


# --- AMX ---------------------------------------------------------------------------------


def amx_allowed(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    return environ.get(AMX_ENV, "").strip().lower() in ("1", "on", "yes", "true")


def use_extra_buffer_types(build_has_amx: bool, allow_amx: bool) -> bool:
    """Whether llama.cpp may choose among its extra weight buffer types (AMX, REPACK, ...).

    llama.cpp tries AMX first for every weight it supports, and its AMX matmul
    segfaults on common weights (llama.cpp #20824). Where the build has AMX, the
    extra types are off unless the user asks for AMX, and `repack_patterns` hands
    REPACK back the weights it can take.
    """
    return allow_amx or not build_has_amx


# The dense matmul weights of llama.cpp's common architectures: 2-D, used by MUL_MAT only.
MATMUL_WEIGHT = re.compile(
    r"^(?:blk\.(\d+)\.(attn_q|attn_k|attn_v|attn_qkv|attn_output|ffn_up|ffn_gate|ffn_down)"
    r"|(output))\.weight$"
)
# Types llama.cpp's x86 REPACK takes, with the CPU feature it needs (repack.cpp,
# ggml_repack_get_optimal_repack_type: all of them want rows in multiples of 8).
X86_REPACK_TYPES = {
    "Q4_0": "AVX2",
    "Q4_K": "AVX2",
    "IQ4_NL": "AVX2",
    "MXFP4": "AVX2",
    "Q2_K": "AVX512",
}
REPACK_ROWS = 8


def repack_patterns(tensors: list[tuple[str, str, tuple[int, ...]]], build: BuildInfo) -> list[str]:
    """Regexes naming the weights REPACK can take, for llama.cpp's tensor buffer overrides.

    `tensors` is the GGUF tensor table: (name, type name, shape in ggml order). A weight
    forced onto REPACK that its rules refuse would crash on load, so only what those rules
    accept on this build is named: the dense matmul weights of a listed type whose row
    count is a multiple of 8. One pattern per kind of weight, listing its layers.
    """
    if "REPACK" not in build.cpu_features:
        return []
    layers: dict[str, list[str]] = {}
    for name, type_name, shape in tensors:
        match = MATMUL_WEIGHT.match(name)
        feature = X86_REPACK_TYPES.get(type_name)
        if (
            not match
            or feature not in build.cpu_features
            or len(shape) != 2
            or shape[1] % REPACK_ROWS
        ):
            continue
        layer, kind, output = match.groups()
        layers.setdefault(output or kind, []).append(layer)
    return [
        r"^output\.weight$"
        if kind == "output"
        else rf"^blk\.({'|'.join(numbers)})\.{kind}\.weight$"
        for kind, numbers in layers.items()
    ]


def repack_buffer_type() -> int | None:
    """llama.cpp's CPU_REPACK buffer type, for a tensor override; None where it is not built."""
    for buft in _cpu_extra_bufts():
        if _text(_buft_name(buft)) == "CPU_REPACK":
            return buft
    return None


def gpu_offload_supported() -> bool:
    """A GPU on this machine (llama.cpp's own answer is yes wherever its RPC backend is built
    in)."""
    return bool(gpu_handles())
