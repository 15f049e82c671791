"""Fixtures the integration tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import huggingface_hub.utils as hub_utils
import pytest
from huggingface_hub import constants as hf_constants

from tests.support.hubserver import HubServer


@pytest.fixture
def hub(hf_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    """A Hub on loopback that huggingface_hub may reach: offline mode off for this test only."""
    server = HubServer()
    monkeypatch.setenv("HF_ENDPOINT", server.start())
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)  # read once, at import
    if hasattr(hub_utils, "reset_sessions"):  # releases before 1.0 keep a session made offline
        hub_utils.reset_sessions()
    yield server
    server.stop()
