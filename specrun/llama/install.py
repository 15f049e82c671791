"""How specrun's own install builds llama-cpp-python, and the cache of the wheels it built.

llama.cpp built with GGML_NATIVE on an Intel CPU with AMX compiles its AMX matrix
multiply, which segfaults on common weights (llama.cpp issue #20824). So on x86 the
install turns GGML_NATIVE off and names each vector extension the host has (AVX2,
AVX-512, VNNI, ...) explicitly, leaving AMX out; REPACK stays on (llama.cpp's default).
The RPC backend is always on, so `specrun rpc-server` and `--rpc` work on any build.
A user's own CMAKE_ARGS (CUDA, Metal, Vulkan) come after ours, so they win.

pip caches a wheel built from an sdist by its name and version, not by the flags it
was built with, so it would silently reuse a wheel built for another backend. The
wheels built here are kept under a key made of everything that decides the build.

llama-cpp-python publishes prebuilt wheels on an index of its own, not on PyPI: one for the
CPU, one per CUDA version, one for Metal. They are built from the same sdist, so they export the
staging functions specrun binds (specrun.llama.ext); they leave out the RPC backend, and the CPU
wheel for x86 is compiled for AVX2 without AVX-512 or AMX. `choose` takes one where it fits this
machine and nothing asks for a compile (the user's CMAKE_ARGS, `--compile` for RPC, an AMX CPU
whose guard is tested on the compiled build, a CPU without the wheel's instructions); where the
index has no wheel for this platform or cannot be reached, the wheel is compiled. A wheel
compiled here before is preferred to the CPU or Metal one: it is tuned to this CPU and has RPC.
One line says which wheel it took and why.

The standard library and platformdirs only: the Makefile runs this file before anything else
is installed.

    python specrun/llama/install.py PIP      # a prebuilt wheel, or build or reuse one; install it
    python specrun/llama/install.py --compile PIP  # always compiled: RPC, this CPU's instructions
    python specrun/llama/install.py --print  # the CMake arguments and the cache key
    python specrun/llama/install.py --vulkan FOLDER  # a Vulkan build, in an environment of its own

The Vulkan build goes into a second environment, FOLDER, that sees every package of the one
running this file but has its own llama-cpp-python: the CPU environment stays as it was, and
both run the same checkout. ggml-vulkan needs Vulkan headers 1.3.272 or later; where the
system's are older (Debian 12's), `.ci/vulkan-deps` unpacks newer ones into specrun's cache
and the build is pointed at them.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "llama-cpp-python"
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

# /proc/cpuinfo flag -> the llama.cpp CMake option that compiles for it.
X86_FEATURES = {
    "sse4_2": "GGML_SSE42",
    "avx": "GGML_AVX",
    "avx2": "GGML_AVX2",
    "fma": "GGML_FMA",
    "f16c": "GGML_F16C",
    "bmi2": "GGML_BMI2",
    "avx_vnni": "GGML_AVX_VNNI",
    "avx512vbmi": "GGML_AVX512_VBMI",
    "avx512_vnni": "GGML_AVX512_VNNI",
    "avx512_bf16": "GGML_AVX512_BF16",
}
# GGML_AVX512 compiles for all five at once.
AVX512_BASE = ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")
AMX_OPTIONS = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")
# On every host: specrun's rpc-server and --rpc need ggml's RPC backend.
ALWAYS = ["-DGGML_RPC=ON"]
VULKAN = ["-DGGML_VULKAN=ON"]
# ggml-vulkan uses VK_EXT_layer_settings, first in the Vulkan headers 1.3.272.
VULKAN_HEADERS_NEEDED = 272

# llama-cpp-python's own index of prebuilt wheels (its README): a folder per backend.
WHEEL_INDEX = "https://abetlen.github.io/llama-cpp-python/whl"
# The CUDA versions it publishes wheels for, newest last (its build-wheels-cuda.yaml).
CUDA_WHEEL_INDEXES = ("cu118", "cu121", "cu122", "cu123", "cu124", "cu125", "cu130", "cu132")
# What its x86 wheels are compiled for: ggml's defaults with GGML_NATIVE off
# (build-and-release.yaml), SSE4.2 up to AVX2; a CPU without one of them would stop on it.
PREBUILT_X86_FLAGS = ("sse4_2", "avx", "avx2", "bmi2", "fma", "f16c")
AMX_FLAGS = ("amx_tile", "amx_int8", "amx_bf16")
# Prebuilt wheels that a wheel compiled here serves as well (a compile on Apple silicon has Metal).
SERVED_BY_A_COMPILE = ("cpu", "metal")


def pinned_version(pyproject: Path = PYPROJECT) -> str:
    """The llama-cpp-python version pinned in pyproject.toml: one place for it. Installed from
    a wheel there is no pyproject.toml, and specrun's metadata carries the same pin."""
    if not pyproject.is_file():
        return installed_pin()
    match = re.search(r'"llama-cpp-python==([^"]+)"', pyproject.read_text(encoding="utf-8"))
    if not match:
        raise SystemExit(f"no llama-cpp-python==VERSION pin in {pyproject}")
    return match.group(1)


def installed_pin() -> str:
    """The llama-cpp-python==VERSION requirement of the installed specrun (its wheel's metadata)."""
    from importlib import metadata

    try:
        requirements = metadata.requires("specrun") or []
    except metadata.PackageNotFoundError:
        requirements = []
    for requirement in requirements:
        match = re.fullmatch(r"llama[-_.]cpp[-_.]python\s*==\s*([^\s;]+)", requirement.strip())
        if match:
            return match.group(1)
    raise SystemExit("no llama-cpp-python==VERSION pin in the installed specrun's metadata")


def host_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags as Linux names them; empty where there is no /proc/cpuinfo."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def is_x86(machine: str | None = None) -> bool:
    return (machine or platform.machine()).lower() in ("x86_64", "amd64", "i686", "x86")


def cpu_cmake_args(flags: set[str], machine: str | None = None) -> list[str]:
    """CMake options for the host CPU without AMX; none (llama.cpp's native default) off x86."""
    if not is_x86(machine) or not flags:
        return []
    args = ["-DGGML_NATIVE=OFF"]
    options = {option: feature in flags for feature, option in X86_FEATURES.items()}
    options["GGML_AVX512"] = all(feature in flags for feature in AVX512_BASE)
    options.update(dict.fromkeys(AMX_OPTIONS, False))
    args += [f"-D{option}={'ON' if on else 'OFF'}" for option, on in sorted(options.items())]
    return args


def cmake_args(flags: set[str], user_args: str = "", machine: str | None = None) -> str:
    """Ours first, the user's after: CMake keeps the last value of an option."""
    return " ".join(ALWAYS + cpu_cmake_args(flags, machine) + user_args.split())


@dataclass(frozen=True)
class Host:
    """What decides between a prebuilt wheel and a compile, as values."""

    system: str  # platform.system(): Linux, Darwin, Windows
    machine: str  # platform.machine()
    cpu_flags: frozenset[str]  # as /proc/cpuinfo names them; empty where they cannot be read
    cuda: tuple[int, int] | None  # the CUDA version the NVIDIA driver runs; None without one
    user_args: str  # the user's CMAKE_ARGS
    compile_asked: bool  # --compile


@dataclass(frozen=True)
class Choice:
    """A prebuilt wheel's folder under WHEEL_INDEX (cpu, cu124, metal), or None for a compile,
    and why, for the line that says which."""

    index: str | None
    why: str


def driver_cuda_version(nvidia_smi: str) -> tuple[int, int] | None:
    """The CUDA version in nvidia-smi's header ("CUDA Version: 12.4"): the newest it runs."""
    match = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", nvidia_smi)
    return (int(match.group(1)), int(match.group(2))) if match else None


def host_cuda() -> tuple[int, int] | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        output = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return driver_cuda_version(output)


def cuda_wheel_index(cuda: tuple[int, int]) -> str | None:
    """The newest prebuilt CUDA wheel the driver runs (a driver runs older CUDA too)."""
    usable = [tag for tag in CUDA_WHEEL_INDEXES if (int(tag[2:-1]), int(tag[-1])) <= cuda]
    return usable[-1] if usable else None


def choose(host: Host) -> Choice:
    """A prebuilt wheel where one fits and nothing asks for a compile. Whether the index has one
    for this platform and interpreter, pip finds out: where it has none, the wheel is compiled."""
    if host.compile_asked:
        return Choice(None, "compiled as asked (--compile): RPC and this CPU's own instructions")
    if host.user_args.strip():
        return Choice(None, f"compiled for CMAKE_ARGS={host.user_args.strip()!r}")
    if is_x86(host.machine):
        if host.cpu_flags & set(AMX_FLAGS):
            return Choice(None, "compiled without AMX, which this CPU has (llama.cpp #20824)")
        missing = [flag for flag in PREBUILT_X86_FLAGS if flag not in host.cpu_flags]
        if host.cpu_flags and missing:  # flags unknown (Windows): AVX2 is the norm since 2013
            return Choice(None, f"compiled: the prebuilt wheels need {', '.join(missing)}")
    if host.system == "Darwin" and host.machine == "arm64":
        return Choice("metal", "Metal")
    if host.cuda is not None:
        version = f"{host.cuda[0]}.{host.cuda[1]}"
        index = cuda_wheel_index(host.cuda)
        if index is None:
            return Choice(None, f"compiled for the CPU: no prebuilt wheel runs on CUDA {version}")
        return Choice(index, f"CUDA (the driver runs {version})")
    return Choice("cpu", "the CPU" + (" (AVX2, no AMX)" if host.cpu_flags else ""))


def this_host(compile_asked: bool = False) -> Host:
    return Host(
        system=platform.system(),
        machine=platform.machine(),
        cpu_flags=frozenset(host_cpu_flags()),
        cuda=host_cuda(),
        user_args=os.environ.get("CMAKE_ARGS", ""),
        compile_asked=compile_asked,
    )


def build_key(version: str, args: str) -> str:
    """Everything that decides the wheel: package version, CMake arguments, interpreter, OS."""
    identity = "\n".join(
        [
            version,
            args,
            platform.system(),
            platform.machine(),
            sys.implementation.name,
            f"{sys.version_info.major}.{sys.version_info.minor}",
        ]
    )
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def wheel_cache() -> Path:
    """In specrun's cache, beside the demo pair."""
    from specrun.system.paths import cache_dir

    return cache_dir() / "wheels"


def wheel_folder(version: str, args: str) -> Path:
    """Where the wheel of this version and these CMake arguments is kept."""
    return wheel_cache() / f"{PACKAGE}-{version}-{build_key(version, args)}"


def cached_wheel(folder: Path) -> Path | None:
    wheels = sorted(folder.glob("llama_cpp_python-*.whl"))
    return wheels[0] if wheels else None


def fill(folder: Path, run: Callable[[str], bool]) -> Path | None:
    """The wheel `run` leaves in the scratch folder it is given, moved to `folder` whole where
    `run` says it succeeded; None where it did not."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".building-") as scratch:
        if not run(scratch):
            return None
        try:
            os.replace(scratch, folder)  # atomic: a concurrent build of the same key just loses
        except OSError:  # another install filled the same folder first
            if cached_wheel(folder) is None:
                raise
        else:
            os.mkdir(scratch)  # TemporaryDirectory removes it on exit
    wheel = cached_wheel(folder)
    assert wheel is not None, f"pip left no wheel in {folder}"
    return wheel


def build_wheel(pip: str, version: str, args: str, folder: Path) -> Path:
    """Compile llama-cpp-python once for these arguments; pip's errors show as they come."""

    def run(scratch: str) -> bool:
        command = [pip, "wheel", "-q", "--no-deps", "--no-cache-dir", "--no-binary", PACKAGE]
        command += ["-w", scratch, f"{PACKAGE}=={version}"]
        subprocess.run(command, env=dict(os.environ, CMAKE_ARGS=args), check=True)
        return True

    wheel = fill(folder, run)
    assert wheel is not None
    return wheel


def fetch_prebuilt(pip: str, version: str, url: str, folder: Path) -> tuple[Path | None, str]:
    """The prebuilt wheel at the index `url` for this platform and interpreter, downloaded into
    `folder` whole; or None and pip's reason, where the index has none or cannot be reached (a
    compile follows: pip's own output would read as a failure)."""
    reason = ""

    def run(scratch: str) -> bool:
        nonlocal reason
        command = [pip, "download", "-q", "--no-deps", "--only-binary", ":all:", "--retries", "1"]
        command += ["--timeout", "20", "--index-url", url, "-d", scratch, f"{PACKAGE}=={version}"]
        result = subprocess.run(command, capture_output=True, text=True)
        errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
        reason = errors[-1].removeprefix("ERROR:").strip() if errors else result.stderr.strip()
        return result.returncode == 0

    return fill(folder, run), reason


def compiled_wheel(pip: str, version: str, args: str) -> Path:
    folder = wheel_folder(version, args)
    return cached_wheel(folder) or build_wheel(pip, version, args, folder)


def vulkan_header_version(include: Path) -> int | None:
    """VK_HEADER_VERSION of the Vulkan headers in `include` (272 for 1.3.272); None without them."""
    try:
        text = (include / "vulkan" / "vulkan_core.h").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(r"^#define VK_HEADER_VERSION (\d+)$", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def vulkan_headers_cache() -> Path:
    """Where `.ci/vulkan-deps` unpacks newer Vulkan headers: VERSION/usr/include under it."""
    from specrun.system.paths import cache_dir

    return cache_dir() / "vulkan-headers"


def vulkan_cmake_args(system_include: Path = Path("/usr/include")) -> list[str]:
    """-DGGML_VULKAN=ON, pointed at newer headers where the system's are too old for ggml-vulkan.

    A Vulkan SDK (VULKAN_SDK set) or headers CMake finds elsewhere are left to CMake."""
    system = vulkan_header_version(system_include)
    if os.environ.get("VULKAN_SDK") or system is None or system >= VULKAN_HEADERS_NEEDED:
        return VULKAN
    newer = sorted(
        (version, include)
        for include in vulkan_headers_cache().glob("*/usr/include")
        if (version := vulkan_header_version(include) or 0) >= VULKAN_HEADERS_NEEDED
    )
    if not newer:
        raise SystemExit(
            f"specrun: error: the Vulkan headers in {system_include} are 1.3.{system} and "
            f"llama.cpp's Vulkan backend needs 1.3.{VULKAN_HEADERS_NEEDED} or later: run "
            ".ci/vulkan-deps (Debian, Ubuntu) or install the Vulkan SDK and set VULKAN_SDK"
        )
    return VULKAN + [f"-DVulkan_INCLUDE_DIR={newer[-1][1]}"]


def this_build(extra: Sequence[str] = ()) -> tuple[str, str]:
    """The pinned version and the CMake arguments for this host, `extra` (a backend's) and the
    user's CMAKE_ARGS, in that order."""
    user = " ".join([*extra, os.environ.get("CMAKE_ARGS", "")]).strip()
    return pinned_version(), cmake_args(host_cpu_flags(), user)


def overlay_environment(folder: Path) -> str:
    """A venv at `folder` that sees this environment's packages after its own, so that a
    llama-cpp-python installed there takes the place of this one's; its pip."""
    scripts = "Scripts" if os.name == "nt" else "bin"
    python = folder / scripts / ("python.exe" if os.name == "nt" else "python")
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # A .pth line that starts with `import` runs: addsitedir reads that folder's own .pth files
    # too (the editable install of specrun among them), and appends it to sys.path.
    base = sysconfig.get_paths()["purelib"]
    (Path(site) / "specrun-base-environment.pth").write_text(
        f"import site; site.addsitedir({base!r})\n", encoding="utf-8"
    )
    return str(python.parent / ("pip.exe" if os.name == "nt" else "pip"))


def installed_wheel(marker: Path) -> tuple[str, Path] | None:
    """The plan and the wheel an environment's marker records (None without one)."""
    try:
        plan, _, wheel = marker.read_text(encoding="utf-8").partition("\n")
    except OSError:
        return None
    return (plan, Path(wheel)) if wheel else None


def say(line: str) -> None:
    print(f"{PACKAGE} {line}", flush=True)


def install(pip: str, extra: Sequence[str] = (), compile_asked: bool = False) -> None:
    version, args = this_build(extra)
    # A backend's build (Vulkan) is always compiled: its wheels lack the CPU flags and RPC.
    choice = Choice(None, "compiled for Vulkan") if extra else choose(this_host(compile_asked))
    plan = f"{version} {choice.index or 'compile'} {args}"
    marker = Path(pip).parent.parent / ".llama-build"  # in the environment PIP installs into
    recorded = installed_wheel(marker)
    if recorded is not None and recorded[0] == plan and recorded[1].is_file():
        return  # installed already: the usual case, said nothing
    compiled = cached_wheel(wheel_folder(version, args))
    compiling = (
        "the wheel compiled here before (install.py --print shows its CMAKE_ARGS)"
        if compiled
        else f"compiling with CMAKE_ARGS={args!r} (about 9 minutes on 2 cores)"
    )
    wheel = None
    if choice.index is None:
        say(f"{version}: {choice.why}: {compiling}")
    elif compiled is not None and choice.index in SERVED_BY_A_COMPILE:
        preferred = f"preferred to the prebuilt wheel for {choice.why}"
        say(f"{version}: the wheel compiled here before (this CPU's, with RPC), {preferred}")
    else:
        url = f"{WHEEL_INDEX}/{choice.index}"
        wheel, reason = fetch_prebuilt(pip, version, url, wheel_folder(version, url))
        if wheel is not None:
            rpc = "no RPC backend: COMPILE_LLAMA=1 make llama, or --compile, compiles one"
            say(f"{version}: the prebuilt wheel for {choice.why} from {url} ({rpc})")
        else:
            cuda = choice.index.startswith("cu")
            gpu = "; for the CPU: CMAKE_ARGS=-DGGML_CUDA=on compiles for CUDA" if cuda else ""
            say(f"{version}: no prebuilt wheel at {url} ({reason}); {compiling}{gpu}")
    wheel = wheel or compiled or compiled_wheel(pip, version, args)
    # --force-reinstall: a llama-cpp-python of the same version but other flags may be there.
    # (In an overlay environment pip leaves the base environment's alone: outside its own.)
    subprocess.run([pip, "install", "-q", "--no-deps", "--force-reinstall", str(wheel)], check=True)
    # Then its own requirements (diskcache, jinja2, numpy), which --force-reinstall would
    # reinstall too: missing, the next pip run would report them as a resolver ERROR.
    subprocess.run([pip, "install", "-q", str(wheel)], check=True)
    marker.write_text(f"{plan}\n{wheel}", encoding="utf-8")


def main(argv: list[str]) -> None:
    if argv[:1] == ["--print"]:
        vulkan = argv[1:] == ["--vulkan"]
        version, args = this_build(vulkan_cmake_args() if vulkan else ())
        choice = Choice(None, "compiled for Vulkan") if vulkan else choose(this_host())
        wheel = f"prebuilt from {WHEEL_INDEX}/{choice.index}" if choice.index else "compiled"
        print(f"wheel={wheel} ({choice.why})\nCMAKE_ARGS={args}\nkey={build_key(version, args)}")
        return
    compile_asked = argv[:1] == ["--compile"]
    argv = argv[1:] if compile_asked else argv
    if len(argv) not in (1, 2) or (len(argv) == 2 and argv[0] != "--vulkan"):
        raise SystemExit(__doc__)
    try:
        if argv[0] == "--vulkan":
            install(overlay_environment(Path(argv[1])), vulkan_cmake_args())
        else:
            install(argv[0], compile_asked=compile_asked)
    except OSError as error:  # a cache folder that is a file, a read-only disk: one line
        raise SystemExit(f"specrun: error: cannot build or install {PACKAGE}: {error}") from None
    except subprocess.CalledProcessError as error:  # pip said why above
        raise SystemExit(f"specrun: error: {error.cmd[1]} {PACKAGE} failed") from None


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's specrun
    main(sys.argv[1:])
