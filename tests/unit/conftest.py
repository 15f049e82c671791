"""The unit tier: no model loads and no processes, so that `pytest tests/unit` runs in
seconds while working. A test that needs either belongs in tests/integration or
tests/e2e; here it fails at once, naming the tier to move it to."""

from __future__ import annotations

import subprocess

import pytest

from specrun.llama import model


@pytest.fixture(autouse=True)
def _no_models_and_no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(what: str, tier: str):
        def refused(*args: object, **kwargs: object) -> None:
            raise AssertionError(f"a unit test {what}: move it to tests/{tier}")

        return refused

    monkeypatch.setattr(model.Model, "__init__", refuse("loads a model", "integration"))
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("starts a process", "e2e"))
