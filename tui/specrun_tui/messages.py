"""What crosses the pipe between the TUI and the engine process (engine_process.py).

Small frozen records, pickled. The engine's own events (Prefill, Round) cross as they
are, so the TUI computes its figures from the very records `specrun run` reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from specrun.core.loop import Prefill, Round
from specrun.core.sampling import SamplingParams
from specrun.prompt import Message
from specrun_tui.commands import (
    Clear,
    LoadConversation,
    SaveConversation,
    SetGamma,
    SetSampling,
    SetSystem,
    SwitchDraft,
)

# --- the TUI to the engine ---------------------------------------------------------------


@dataclass(frozen=True)
class Ask:
    text: str
    max_tokens: int


@dataclass(frozen=True)
class AskAgain:
    """Answer the last user message again, its answer dropped: Started, or Refused."""

    max_tokens: int


@dataclass(frozen=True)
class EndAnswer:
    """End the answer after the current round."""


# the slash commands the engine carries out
Setting = Clear | SetSystem | SetSampling | SetGamma
Command = Ask | AskAgain | EndAnswer | Setting | SwitchDraft | SaveConversation | LoadConversation

# --- the engine to the TUI, besides its events -------------------------------------------


@dataclass(frozen=True)
class ConversationLoaded:
    """LoadConversation carried out: the conversation now held, for the transcript."""

    system: str | None
    turns: tuple[Message, ...]
    note: str  # what was loaded, in one line


@dataclass(frozen=True)
class Loaded:
    summary: str  # target, draft, device and GPU layers, for the bar at the top
    draft: str  # the draft source's name, "none" for plain decoding
    policy: str
    params: SamplingParams
    gamma_max: int
    resumed: ConversationLoaded | None = None  # the conversation the chat goes on with


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
class DraftSwitched:
    """SwitchDraft done: the engine as it now is, and why its draft did not change if not."""

    loaded: Loaded
    refusal: str | None = None


@dataclass(frozen=True)
class Said:
    """One line in answer to a command the engine carried out (saved, refused)."""

    text: str
    error: bool = False


@dataclass(frozen=True)
class Ended:
    """The engine process is gone: it crashed or was killed (made on the TUI's side)."""

    error: str


Reply = (
    Loaded
    | LoadFailed
    | Started
    | Refused
    | Finished
    | DraftSwitched
    | Said
    | ConversationLoaded
    | Ended
    | Prefill
    | Round
)
