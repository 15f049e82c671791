"""What crosses the pipe between the TUI and the engine process (engine_process.py).

Small frozen records, pickled. The engine's own events (Prefill, Round) cross as they
are, so the TUI computes its figures from the very records `specrun run` reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from specrun.core.loop import Prefill, Round
from specrun.core.sampling import SamplingParams
from specrun_tui.commands import Clear, SetGamma, SetSampling, SetSystem

# --- the TUI to the engine ---------------------------------------------------------------


@dataclass(frozen=True)
class Ask:
    text: str
    max_tokens: int


@dataclass(frozen=True)
class EndAnswer:
    """End the answer after the current round."""


Setting = Clear | SetSystem | SetSampling | SetGamma  # the slash commands the engine carries out
Command = Ask | EndAnswer | Setting

# --- the engine to the TUI, besides its events -------------------------------------------


@dataclass(frozen=True)
class Loaded:
    summary: str  # target, draft, device and GPU layers, for the bar at the top
    policy: str
    params: SamplingParams
    gamma_max: int


@dataclass(frozen=True)
class LoadFailed:
    error: str


@dataclass(frozen=True)
class Started:
    """The answer to an Ask is under way; its events follow, then Finished."""

    dropped_notice: str | None  # old exchanges were dropped to fit the context


@dataclass(frozen=True)
class Refused:
    """The Ask cannot be answered (the message does not fit): nothing follows."""

    error: str


@dataclass(frozen=True)
class Finished:
    """The answer's last event has been sent; `error` if the engine failed."""

    error: str | None


@dataclass(frozen=True)
class Ended:
    """The engine process is gone: it crashed or was killed (made on the TUI's side)."""

    error: str


Reply = Loaded | LoadFailed | Started | Refused | Finished | Ended | Prefill | Round
