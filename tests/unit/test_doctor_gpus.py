"""doctor's judgement of GPUs: which backend each vendor's GPU needs, GPUs found by their DRM
render nodes, a GPU backend built in that sees no device, and a software Vulkan device."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from specrun import doctor
from specrun.llama.devices import BuildInfo, Device

CPU_BUILD = BuildInfo("0.3.36", ("CPU", "RPC"), ("AVX2", "FMA"), ("CPU_REPACK",))
VULKAN_BUILD = replace(CPU_BUILD, backends=("Vulkan", "CPU", "RPC"))
CPU = Device("CPU", "Intel(R) Xeon(R)", "CPU", "CPU", 16 << 30, 32 << 30)
RADEON = Device(
    "Vulkan0", "AMD Radeon RX 7800 XT (RADV NAVI32)", "GPU", "Vulkan", 15 << 30, 16 << 30
)
LAVAPIPE = Device("Vulkan0", "llvmpipe (LLVM 15.0.6, 256 bits)", "GPU", "Vulkan", 2 << 30, 2 << 30)


def report(build: BuildInfo, gpus: list[doctor.HostGpu], devices: list[Device]) -> doctor.Report:
    return doctor.Report(
        build=build,
        devices=devices,
        host_cpu_flags={"avx2", "fma"},
        host_gpus=gpus,
        amx_allowed=False,
        demo_pair_present=True,
    )


def fake_drm(root: Path, vendors: list[str]) -> Path:
    """/sys/class/drm as Linux lays it out: a render node per GPU, its PCI vendor id inside."""
    for i, vendor in enumerate(vendors):
        (root / f"renderD{128 + i}" / "device").mkdir(parents=True)
        (root / f"renderD{128 + i}" / "device" / "vendor").write_text(f"{vendor}\n")
    (root / "card0").mkdir()  # a display node, not a render node
    return root


def test_gpus_are_found_by_their_render_nodes(tmp_path: Path) -> None:
    drm = fake_drm(tmp_path / "drm", ["0x8086", "0x1002", "0x1af4"])  # Intel, AMD, a virtual GPU
    found = doctor.host_gpus(drm=drm, kfd=tmp_path / "no-kfd")
    intel, amd = [gpu for gpu in found if gpu.vendor in ("Intel", "AMD")]
    assert intel.usable_backends == ("Vulkan", "SYCL")
    assert amd.usable_backends == ("Vulkan",)  # no ROCm driver (/dev/kfd): Vulkan's
    assert not any(gpu.vendor not in ("Intel", "AMD", "NVIDIA", "Apple") for gpu in found)
    assert doctor.drm_vendors(tmp_path / "absent") == []


def test_an_intel_or_amd_gpu_on_a_cpu_build_gets_the_vulkan_build() -> None:
    for gpu in (
        doctor.HostGpu("Intel", "a DRM render node"),
        doctor.HostGpu("AMD", backends=("Vulkan",)),
    ):
        (problem,) = doctor.problems(report(CPU_BUILD, [gpu], [CPU]))
        assert f"{gpu.vendor} GPU" in problem.problem and "built without Vulkan" in problem.problem
        assert 'CMAKE_ARGS="-DGGML_VULKAN=on" pip install --force-reinstall' in problem.fix
        assert (
            "whl/vulkan" in problem.fix
            and 'CMAKE_ARGS="-DGGML_VULKAN=on" make llama' in problem.fix
        )


def test_a_vulkan_build_serves_amd_intel_and_nvidia() -> None:
    gpus = [
        doctor.HostGpu("AMD", "ROCm driver (/dev/kfd)"),
        doctor.HostGpu("Intel"),
        doctor.HostGpu("NVIDIA", "CUDA 12.4", (12, 4)),
    ]
    assert doctor.problems(report(VULKAN_BUILD, gpus, [CPU, RADEON])) == []
    # Without any GPU backend, NVIDIA's is CUDA and ROCm's AMD is ROCm, first.
    fixes = [p.fix for p in doctor.problems(report(CPU_BUILD, gpus, [CPU]))]
    assert any("-DGGML_HIP=on" in fix for fix in fixes)
    assert any("-DGGML_CUDA=on" in fix for fix in fixes)


def test_a_vulkan_build_without_a_vulkan_device_says_so() -> None:
    (problem,) = doctor.problems(report(VULKAN_BUILD, [], [CPU]))
    assert "built with Vulkan but sees no Vulkan device" in problem.problem
    assert "vulkaninfo --summary" in problem.fix and "mesa-vulkan-drivers" in problem.fix


def test_a_software_vulkan_device_is_called_slow() -> None:
    (problem,) = doctor.problems(report(VULKAN_BUILD, [], [LAVAPIPE, CPU]))
    assert problem.problem.startswith("Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)) is a software")
    assert "GGML_VK_VISIBLE_DEVICES" in problem.fix
    lines = doctor.render_text(report(VULKAN_BUILD, [], [LAVAPIPE, CPU]))
    assert any(line.strip().startswith("Vulkan0    GPU  Vulkan: llvmpipe") for line in lines)
