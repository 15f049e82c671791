"""The signal policy's own bookkeeping, in process (the real signals are tests/e2e's)."""

from __future__ import annotations

import contextlib
import os
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


@pytest.mark.usefixtures("fresh_policy")
def test_a_signal_caught_but_not_yet_handled_is_held_before_a_fork(monkeypatch):
    """The C-level handler ran (the wakeup pipe has the signal) but the Python one has not:
    `settle` holds it, so the supervisor forks with it rather than keep it to itself (seen in
    a CI run: SIGTERM then SIGINT at start gave 130). Without one, nothing is held."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    monkeypatch.setattr(interrupts, "_arrivals", read_end)
    monkeypatch.setattr(interrupts, "_holding", True)
    try:
        assert interrupts.settle() is None
        os.write(write_end, bytes([signal.SIGCHLD, signal.SIGTERM, signal.SIGINT]))
        assert interrupts.settle() == signal.SIGTERM and interrupts.held() == signal.SIGTERM
        interrupts._handle(signal.SIGINT, None)  # its Python handler, later: the first decides
        assert interrupts.held() == signal.SIGTERM
    finally:
        os.close(read_end)
        os.close(write_end)
