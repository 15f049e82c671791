"""install.py's pip runs, on a local index standing in for llama-cpp-python's own (which this
machine may not reach): a prebuilt wheel downloaded into the cache whole, an index without
one falling back to the compiled wheel, and an environment left with no broken requirement.

The machine's facts (its CPU flags, its CUDA driver) are given as values: the wheel installed is
the real one `make llama` put in this environment, so nothing is compiled here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specrun.llama import install

PIP = str(Path(sys.executable).with_name("pip"))
AVX2_CPU = {"sse4_2", "avx", "avx2", "bmi2", "fma", "f16c"}


@pytest.fixture(scope="module")
def wheel() -> Path:
    """The llama-cpp-python wheel this environment was installed from."""
    recorded = install.installed_wheel(Path(sys.prefix) / ".llama-build")
    if recorded is not None and recorded[1].is_file():
        return recorded[1]
    version, args = install.this_build()
    found = install.cached_wheel(install.wheel_folder(version, args))
    if found is None:  # `make test` installs it first: never skip quietly
        pytest.fail("no llama-cpp-python wheel recorded or cached: run `make llama`")
    return found


def test_a_prebuilt_wheel_lands_in_the_cache_whole(tmp_path: Path, wheel: Path) -> None:
    # A project page as PEP 503 has it (llama-cpp-python's index is one), linking the wheel.
    project = tmp_path / "index" / "llama-cpp-python"
    project.mkdir(parents=True)
    (project / wheel.name).symlink_to(wheel)
    link = f'<a href="{wheel.name}">{wheel.name}</a>'
    (project / "index.html").write_text(f"<html><body>{link}</body></html>", encoding="utf-8")
    folder = tmp_path / "cache" / "prebuilt"
    version = install.pinned_version()
    fetched, _ = install.fetch_prebuilt(PIP, version, (tmp_path / "index").as_uri(), folder)
    assert fetched == folder / wheel.name
    assert fetched.read_bytes() == wheel.read_bytes()


def test_an_index_without_the_wheel_says_why_and_leaves_no_folder(tmp_path: Path) -> None:
    (tmp_path / "index").mkdir()
    folder = tmp_path / "cache" / "prebuilt"
    version = install.pinned_version()
    fetched, reason = install.fetch_prebuilt(PIP, version, (tmp_path / "index").as_uri(), folder)
    assert fetched is None and not folder.exists()
    assert reason == f"No matching distribution found for llama-cpp-python=={version}"


def test_without_a_cuda_wheel_the_compiled_one_is_installed_whole(
    tmp_path: Path, wheel: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # A CUDA 12.4 machine whose index has no wheel; the compiled wheel in the cache.
    monkeypatch.setattr(install, "host_cpu_flags", lambda: AVX2_CPU)
    monkeypatch.setattr(install, "host_cuda", lambda: (12, 4))
    monkeypatch.setattr(install, "WHEEL_INDEX", (tmp_path / "index").as_uri())
    monkeypatch.setenv("SPECRUN_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    version, args = install.this_build()
    compiled = install.wheel_folder(version, args)
    compiled.mkdir(parents=True)
    os.link(wheel, compiled / wheel.name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = str(venv / "bin" / "pip")

    install.install(pip)
    said = capfd.readouterr().out.splitlines()
    assert said == [
        f"llama-cpp-python {version}: no prebuilt wheel at {install.WHEEL_INDEX}/cu124 (No "
        f"matching distribution found for llama-cpp-python=={version}); the wheel compiled "
        "here before (install.py --print shows its CMAKE_ARGS); for the CPU: "
        "CMAKE_ARGS=-DGGML_CUDA=on compiles for CUDA"
    ]
    # Its own requirements came with it: pip reports nothing missing (diskcache was).
    check = subprocess.run([pip, "check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout
    # Installed once: the next run says nothing and does nothing.
    install.install(pip)
    assert capfd.readouterr().out == ""
