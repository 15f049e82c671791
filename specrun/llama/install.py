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

The standard library and platformdirs only: the Makefile runs this file before anything else
is installed.

    python specrun/llama/install.py PIP      # build or reuse the wheel, install it with PIP
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
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
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


def build_wheel(pip: str, version: str, args: str, folder: Path) -> Path:
    """Compile llama-cpp-python once for these arguments; the result lands in `folder` whole."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    print(
        f"building {PACKAGE} {version} with CMAKE_ARGS={args!r} (about 9 minutes on 2 cores)",
        flush=True,
    )
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".building-") as scratch:
        env = dict(os.environ, CMAKE_ARGS=args)
        subprocess.run(
            [
                pip,
                "wheel",
                "-q",
                "--no-deps",
                "--no-cache-dir",
                "--no-binary",
                PACKAGE,
                "-w",
                scratch,
                f"{PACKAGE}=={version}",
            ],
            env=env,
            check=True,
        )
        os.replace(scratch, folder)  # atomic: a concurrent build of the same key just loses
        os.mkdir(scratch)  # TemporaryDirectory removes it on exit
    wheel = cached_wheel(folder)
    assert wheel is not None, f"pip wheel left no wheel in {folder}"
    return wheel


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


def install(pip: str, extra: Sequence[str] = ()) -> None:
    version, args = this_build(extra)
    folder = wheel_folder(version, args)
    wheel = cached_wheel(folder)
    marker = Path(pip).parent.parent / ".llama-build"  # in the environment PIP installs into
    if wheel is not None and marker.exists() and marker.read_text() == str(wheel):
        return  # installed already: the usual case, said nothing
    if wheel is None:
        try:
            wheel = build_wheel(pip, version, args, folder)
        except OSError:  # another install finished the same build first
            wheel = cached_wheel(folder)
            if wheel is None:
                raise
    else:
        print(f"installing {wheel} (built with CMAKE_ARGS={args!r})", flush=True)
    # --force-reinstall: a llama-cpp-python of the same version but other flags may be there.
    # (In an overlay environment pip leaves the base environment's alone: outside its own.)
    subprocess.run([pip, "install", "-q", "--no-deps", "--force-reinstall", str(wheel)], check=True)
    marker.write_text(str(wheel))


def main(argv: list[str]) -> None:
    if argv[:1] == ["--print"]:
        version, args = this_build(vulkan_cmake_args() if argv[1:] == ["--vulkan"] else ())
        print(f"CMAKE_ARGS={args}\nkey={build_key(version, args)}")
        return
    if len(argv) not in (1, 2) or (len(argv) == 2 and argv[0] != "--vulkan"):
        raise SystemExit(__doc__)
    try:
        if argv[0] == "--vulkan":
            install(overlay_environment(Path(argv[1])), vulkan_cmake_args())
        else:
            install(argv[0])
    except OSError as error:  # a cache folder that is a file, a read-only disk: one line
        raise SystemExit(f"specrun: error: cannot build or install {PACKAGE}: {error}") from None
    except subprocess.CalledProcessError as error:  # pip said why above
        raise SystemExit(f"specrun: error: {error.cmd[1]} {PACKAGE} failed") from None


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's specrun
    main(sys.argv[1:])
