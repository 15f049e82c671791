"""A stop signal while the command starts is held until the command takes it, and the first
stop signal decides the exit status (the real signals are tests/e2e/test_hostile_cli.py's)."""

from __future__ import annotations

import signal
import sys

import pytest

from specrun.system import interrupts


@pytest.fixture
def starting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy as `install()` leaves it: nothing came yet, stops held."""
    for name in ("_pending", "_raised", "_stopping_since"):
        monkeypatch.setattr(interrupts, name, None)
    monkeypatch.setattr(interrupts, "_holding", True)


@pytest.mark.usefixtures("starting")
def test_a_stop_while_starting_is_raised_when_the_command_takes_it():
    interrupts._handle(signal.SIGTERM, None)  # held: no Stop while Python imports and parses
    interrupts._handle(signal.SIGINT, None)  # a second one does not replace the first
    assert interrupts.held() == signal.SIGTERM
    with pytest.raises(interrupts.Stop) as stop:
        interrupts.take()
    assert stop.value.signum == signal.SIGTERM  # was: 130 where SIGINT came last
    interrupts.take()  # taken once


@pytest.mark.usefixtures("starting")
def test_once_taken_a_stop_is_raised_at_once():
    interrupts.take()  # nothing held: the command goes on
    with pytest.raises(interrupts.Stop) as stop:
        interrupts._handle(signal.SIGHUP, None)
    assert stop.value.signum == signal.SIGHUP


@pytest.mark.usefixtures("starting")
def test_in_a_native_callback_the_first_stop_is_kept():
    interrupts.take()

    @interrupts.native_callback
    def progress() -> None:
        interrupts._handle(signal.SIGTERM, sys._getframe())
        interrupts._handle(signal.SIGINT, sys._getframe())

    progress()
    with pytest.raises(interrupts.Stop) as stop:
        interrupts.raise_pending()
    assert stop.value.signum == signal.SIGTERM
