"""Which llama-cpp-python wheel `make demo` installs: a prebuilt one where it fits the machine,
a compile where something asks for one. The machines this cannot run on (CUDA, Metal, an AMX
CPU) are given as the values install.py reads there: /proc/cpuinfo's flags, nvidia-smi's
header, platform.system() and platform.machine()."""

from __future__ import annotations

from pathlib import Path

from specrun.llama import install
from specrun.llama.install import Choice, Host

# /proc/cpuinfo's flags, the vector and matrix ones, of three real CPUs.
EPYC_ZEN4 = (
    "fpu sse sse2 ssse3 fma cx16 sse4_1 sse4_2 popcnt aes xsave avx f16c bmi1 avx2 bmi2 "
    "avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16 avx512vbmi avx512_vnni"
)
SAPPHIRE_RAPIDS = EPYC_ZEN4 + " avx_vnni amx_bf16 avx512_fp16 amx_tile amx_int8"
SANDY_BRIDGE = "fpu sse sse2 ssse3 cx16 sse4_1 sse4_2 popcnt aes xsave avx"
# The first lines of nvidia-smi on a machine whose driver runs CUDA 12.4.
NVIDIA_SMI = """\
Tue Mar 12 10:01:02 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
"""


def linux(flags: str, cuda: tuple[int, int] | None = None, user_args: str = "") -> Host:
    return Host("Linux", "x86_64", frozenset(flags.split()), cuda, user_args, False)


def test_a_cpu_with_avx2_and_without_amx_takes_the_prebuilt_cpu_wheel() -> None:
    assert install.choose(linux(EPYC_ZEN4)) == Choice("cpu", "the CPU (AVX2, no AMX)")


def test_an_amx_cpu_is_compiled_with_amx_left_out() -> None:
    choice = install.choose(linux(SAPPHIRE_RAPIDS))
    assert choice.index is None and "AMX" in choice.why and "#20824" in choice.why
    # The compile that follows names each AMX option off.
    args = install.cmake_args(set(SAPPHIRE_RAPIDS.split()), machine="x86_64")
    assert all(f"-D{option}=OFF" in args.split() for option in install.AMX_OPTIONS)


def test_a_cpu_without_the_prebuilt_wheels_instructions_is_compiled_naming_them() -> None:
    choice = install.choose(linux(SANDY_BRIDGE))
    assert choice.index is None
    assert "avx2, bmi2, fma, f16c" in choice.why


def test_an_nvidia_driver_takes_the_newest_cuda_wheel_it_runs() -> None:
    cuda = install.driver_cuda_version(NVIDIA_SMI)
    assert cuda == (12, 4)
    assert install.choose(linux(EPYC_ZEN4, cuda)) == Choice("cu124", "CUDA (the driver runs 12.4)")
    assert install.cuda_wheel_index((12, 8)) == "cu125"  # no cu126..cu129 wheels
    assert install.cuda_wheel_index((13, 0)) == "cu130"
    assert install.cuda_wheel_index((11, 8)) == "cu118"
    old = install.choose(linux(EPYC_ZEN4, (11, 4)))
    assert old.index is None and "11.4" in old.why


def test_nvidia_smi_without_a_cuda_version_is_no_cuda() -> None:
    assert install.driver_cuda_version("NVIDIA-SMI has failed: no devices were found") is None


def test_apple_silicon_takes_the_metal_wheel() -> None:
    # macOS has no /proc/cpuinfo: no flags, and no AMX guard (Apple's AMX is another thing).
    assert install.choose(Host("Darwin", "arm64", frozenset(), None, "", False)).index == "metal"


def test_where_flags_cannot_be_read_an_x86_cpu_takes_the_cpu_wheel() -> None:
    # Windows: pip then finds the wheel for win_amd64, or none and the wheel is compiled.
    assert install.choose(Host("Windows", "AMD64", frozenset(), None, "", False)).index == "cpu"


def test_cmake_args_or_compile_asked_always_compile() -> None:
    with_args = install.choose(linux(EPYC_ZEN4, (12, 4), user_args="-DGGML_CUDA=on"))
    assert with_args == Choice(None, "compiled for CMAKE_ARGS='-DGGML_CUDA=on'")
    asked = Host("Darwin", "arm64", frozenset(), None, "", True)
    assert install.choose(asked).index is None
    assert "RPC" in install.choose(asked).why


def test_the_flags_come_from_proc_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {SAPPHIRE_RAPIDS}\n", encoding="utf-8")
    flags = install.host_cpu_flags(cpuinfo)
    assert install.choose(linux(" ".join(flags))).index is None
