"""The signal policy's own bookkeeping, in process (the real signals are tests/e2e's)."""

from __future__ import annotations

import contextlib
import signal

import pytest

from specrun.system import interrupts


@pytest.fixture
def fresh_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("_pending", "_raised", "_stopping_since"):
        monkeypatch.setattr(interrupts, name, None)


@pytest.mark.usefixtures("fresh_policy")
def test_no_signal_no_stop():
    interrupts.raise_pending()  # nothing came: the work goes on


@pytest.mark.usefixtures("fresh_policy")
def test_a_stop_that_a_library_swallowed_is_raised_again_at_the_next_native_call():
    """A Stop raised while a library's module-level code ran, and eaten there, would let
    the command run on as if no signal had come (seen in a clean CI run)."""
    with contextlib.suppress(KeyboardInterrupt):  # as a bare `except:` in an import would
        interrupts._handle(signal.SIGTERM, None)
    with pytest.raises(interrupts.Stop) as stop:
        interrupts.raise_pending()
    assert stop.value.signum == signal.SIGTERM
