"""Slash commands typed in the input box, parsed into values the chat screen carries out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from specrun.errors import SpecrunError


@dataclass(frozen=True)
class Clear:
    pass


@dataclass(frozen=True)
class SetSystem:
    text: str | None  # None removes the system prompt


class SamplingChange(TypedDict, total=False):
    """The SamplingParams fields `/set` changes, by name: `replace(params, **change)`."""

    temperature: float
    top_k: int
    top_p: float
    min_p: float
    seed: int | None


@dataclass(frozen=True)
class SetSampling:
    change: SamplingChange  # one field

    def __str__(self) -> str:
        return ", ".join(
            f"{field} = {'none' if value is None else value}"
            for field, value in self.change.items()
        )


@dataclass(frozen=True)
class SetMaxTokens:
    value: int


@dataclass(frozen=True)
class SetGamma:
    spec: str  # validated by Engine.set_gamma


@dataclass(frozen=True)
class Retry:
    """Answer the last message again, in place of its answer."""


@dataclass(frozen=True)
class SwitchDraft:
    spec: str  # as `--draft` takes it; the engine process resolves and loads it


@dataclass(frozen=True)
class SaveConversation:
    path: str


@dataclass(frozen=True)
class LoadConversation:
    path: str


@dataclass(frozen=True)
class ShowStats:
    pass


@dataclass(frozen=True)
class ShowHelp:
    pass


Command = (
    Clear
    | SetSystem
    | SetSampling
    | SetMaxTokens
    | SetGamma
    | Retry
    | SwitchDraft
    | SaveConversation
    | LoadConversation
    | ShowStats
    | ShowHelp
)

COMMAND_HELP: list[tuple[str, str]] = [
    ("/clear", "forget the conversation and the figures"),
    ("/system TEXT", "set the system prompt (no text: remove it)"),
    ("/set temp 0.7", "also top_k, top_p, min_p, seed (N or none)"),
    ("/set max_tokens 512", "most tokens per answer"),
    ("/set gamma auto|heuristic|N", "the γ policy (0: no speculation)"),
    ("/retry", "answer the last message again"),
    ("/draft SPEC", "switch the draft, named as --draft names it"),
    ("/save FILE", "save the conversation"),
    ("/load FILE", "replace the conversation with a saved one"),
    ("/stats", "the full figures of the last answer"),
    ("/help", "keys and commands"),
]


def _optional_int(text: str) -> int | None:
    return None if text.lower() == "none" else int(text)


# name typed after /set -> the change its value makes
SAMPLING_SETTINGS: dict[str, Callable[[str], SamplingChange]] = {
    "temp": lambda text: {"temperature": float(text)},
    "temperature": lambda text: {"temperature": float(text)},
    "top_k": lambda text: {"top_k": int(text)},
    "top_p": lambda text: {"top_p": float(text)},
    "min_p": lambda text: {"min_p": float(text)},
    "seed": lambda text: {"seed": _optional_int(text)},
}
SETTING_NAMES = "temp, top_k, top_p, min_p, seed, max_tokens, gamma"


def parse_command(line: str) -> Command:
    """`line` starts with '/'; a SpecrunError says what is wrong with it."""
    name, _, rest = line[1:].strip().partition(" ")
    name, newline, first_lines = name.partition("\n")  # a command on lines of its own
    rest = (first_lines + newline + rest).strip()
    if name == "clear":
        return Clear()
    if name == "system":
        return SetSystem(rest or None)
    if name == "retry":
        return Retry()
    if name in ("draft", "save", "load"):
        if not rest:
            raise SpecrunError(f"usage: /{name} {'SPEC' if name == 'draft' else 'FILE'}")
        if name == "draft":
            return SwitchDraft(rest)
        return SaveConversation(rest) if name == "save" else LoadConversation(rest)
    if name == "stats":
        return ShowStats()
    if name == "help":
        return ShowHelp()
    if name == "set":
        return _parse_set(rest)
    raise SpecrunError(f"unknown command /{name}; /help lists the commands")


def _parse_set(arguments: str) -> Command:
    setting, _, value = arguments.partition(" ")
    setting, value = setting.replace("-", "_"), value.strip()  # top-k and top_k alike
    if not setting or not value:
        raise SpecrunError(f"usage: /set NAME VALUE, NAME one of {SETTING_NAMES}")
    if setting == "gamma":
        return SetGamma(value)
    try:
        if setting == "max_tokens":
            count = int(value)
            if count < 1:
                raise SpecrunError(f"max_tokens must be at least 1, got {count}")
            return SetMaxTokens(count)
        if setting in SAMPLING_SETTINGS:
            return SetSampling(SAMPLING_SETTINGS[setting](value))
    except ValueError:
        raise SpecrunError(f"/set {setting}: {value!r} is not a number") from None
    raise SpecrunError(f"/set: unknown setting {setting!r}; one of {SETTING_NAMES}")
