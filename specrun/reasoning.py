"""Reasoning models: how a model's chat template says it thinks, and its answer's text split,
as it comes, into its thinking and its answer.

Two syntaxes cover the models people run. Think tags: Qwen3, the DeepSeek-R1 distills,
DeepSeek-V3.1 and GLM-4.5 write `<think>...</think>` before the answer, and some templates
open the tag in the prompt itself (the R1 distills' `<｜Assistant｜><think>\\n`), so the answer
starts inside the thought. gpt-oss's Harmony writes messages on channels:
`<|channel|>analysis<|message|>...<|end|>` is thinking, then
`<|start|>assistant<|channel|>final<|message|>...` the answer (a `commentary` message, a tool
call, is left as answer text for the tool-call reader). The format is read from the template's
text, as llama.cpp's common/chat does; a template with neither has no reasoning to split.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from specrun.errors import OptionError

ReasoningFormat = Literal["think", "harmony", "none"]
Effort = Literal["low", "medium", "high"]
PieceKind = Literal["reasoning", "content"]
Piece = tuple[PieceKind, str]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CHANNEL, MESSAGE, END, START = "<|channel|>", "<|message|>", "<|end|>", "<|start|>"


def reasoning_format(template: str | None) -> ReasoningFormat:
    """How the model whose chat template this is thinks, from the template's own markup."""
    if template is None:
        return "none"
    if CHANNEL in template and MESSAGE in template:
        return "harmony"
    if THINK_CLOSE in template:
        return "think"
    return "none"


def opens_thinking(prompt: str) -> bool:
    """Whether a think-tag prompt leaves the thought open: the answer starts inside it."""
    return prompt.rstrip().endswith(THINK_OPEN)


# What the chat formatter itself passes to the template: a template argument may not set them.
RENDER_ARGUMENTS = frozenset(
    {
        "messages",
        "tools",
        "tool_choice",
        "functions",
        "function_call",
        "bos_token",
        "eos_token",
        "add_generation_prompt",
        "raise_exception",
        "strftime_now",
    }
)


def template_options(
    template: str | None,
    model: str,
    kwargs: Mapping[str, Any],
    *,
    effort: Effort | None = None,
    thinking: bool | None = None,
    thinking_field: str = "thinking",
) -> dict[str, Any]:
    """What the template's render gets beside the messages: the request's own template
    arguments (`chat_template_kwargs`); the thinking toggle as `enable_thinking`, which
    Qwen3's, GLM-4.5's and the DeepSeek templates read (asked for by `thinking_field`); and
    the reasoning effort as `reasoning_effort`, which gpt-oss's reads. The request's own
    fields win over its template arguments, as in llama-server.

    A model that does not think refuses an effort, and a request to think, by the field's
    name, as Ollama refuses `think` for a model that cannot: llama-server passes either on
    silently, which lets a client believe it was applied. A reasoning template without an
    effort control (Qwen3's) takes the effort as llama-server gives it, a template argument
    it may ignore: its model still reasons, so the request is not wrong."""
    taken = sorted(RENDER_ARGUMENTS & kwargs.keys())
    if taken:
        raise OptionError(
            f"`chat_template_kwargs` may not set `{taken[0]}`: the server passes it to the "
            "template itself"
        )
    options = dict(kwargs)
    reasons = reasoning_format(template) != "none"
    if thinking is not None:
        if thinking and not reasons:
            raise OptionError(
                f"`{thinking_field}` asks {model} to think, and its chat template does not: "
                "leave it out"
            )
        options["enable_thinking"] = thinking
    if effort is not None:
        if not reasons:
            raise OptionError(
                f"`reasoning_effort` is for a reasoning model, and {model}'s chat template "
                "does not think: leave it out"
            )
        options["reasoning_effort"] = effort
    return options


class Splitter(Protocol):
    """An answer's text, fed as it comes, as thinking and answer pieces in order."""

    def feed(self, text: str) -> list[Piece]: ...

    def finish(self) -> list[Piece]: ...


def splitter(form: ReasoningFormat, prompt: str) -> Splitter | None:
    """What splits an answer to `prompt` (its text, markup included) in its model's format."""
    if form == "think":
        return ThinkSplitter(thinking=opens_thinking(prompt))
    if form == "harmony":
        return HarmonySplitter()
    return None


def _partial(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker` (held: it may be one)."""
    for length in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-length:]):
            return length
    return 0


def _pieces(*pieces: Piece) -> list[Piece]:
    return [piece for piece in pieces if piece[1]]


@dataclass
class ThinkSplitter:
    """`<think>thought</think>answer`: a thought only at the answer's start (or from the
    start, where the prompt opened it); the whitespace around the thought and before the
    answer trimmed, as the templates write it back. Holds only what may be a partial tag
    and whitespace that may precede one."""

    thinking: bool = False
    _decided: bool = False  # whether the answer's start said if it thinks
    _held: str = ""
    _thought_started: bool = False
    _answer_started: bool = False

    def __post_init__(self) -> None:
        self._decided = self.thinking

    def feed(self, text: str) -> list[Piece]:
        self._held += text
        out: list[Piece] = []
        while True:
            if not self._decided:
                start = self._held.lstrip()
                if start.startswith(THINK_OPEN):
                    self._held, self.thinking, self._decided = start[len(THINK_OPEN) :], True, True
                    continue
                if THINK_OPEN.startswith(start):  # nothing yet, or the tag's beginning
                    return out
                self._decided = self._answer_started = True  # no thought: the text as it is
            if self.thinking:
                end = self._held.find(THINK_CLOSE)
                if end < 0:
                    safe = len(self._held) - _partial(self._held, THINK_CLOSE)
                    thought = self._held[:safe].rstrip()
                    self._held = self._held[len(thought) :]
                    return out + _pieces(("reasoning", self._thought(thought)))
                out += _pieces(("reasoning", self._thought(self._held[:end].rstrip())))
                self._held, self.thinking = self._held[end + len(THINK_CLOSE) :], False
                continue
            if not self._answer_started:
                self._held = self._held.lstrip()
                self._answer_started = bool(self._held)
            answer, self._held = self._held, ""
            return out + _pieces(("content", answer))

    def _thought(self, text: str) -> str:
        if not self._thought_started:
            text = text.lstrip()
            self._thought_started = bool(text)
        return text

    def finish(self) -> list[Piece]:
        held, self._held = self._held, ""
        if self.thinking:  # the answer ended inside its thought (max_tokens, say)
            return _pieces(("reasoning", self._thought(held.rstrip())))
        if not self._decided or self._answer_started:
            return _pieces(("content", held))
        return _pieces(("content", held.lstrip()))


@dataclass
class HarmonySplitter:
    """Harmony's messages: a header (`<|channel|>name ...`, after `<|start|>assistant` from the
    second message on) up to `<|message|>`, then the message up to `<|end|>`. The analysis
    channel's messages are thinking, the final channel's the answer; any other message
    (commentary: a tool call) goes to the answer whole, header and all, for the tool-call
    reader. Text that does not begin as a header is answer text as it is."""

    _held: str = ""
    _in: PieceKind | None = None  # the kind of the message being read; None: a header
    _plain: bool = False  # the answer is not in Harmony's syntax
    _headed: bool = False  # a header was read

    def feed(self, text: str) -> list[Piece]:
        self._held += text
        out: list[Piece] = []
        while self._held:
            if self._plain:
                held, self._held = self._held, ""
                return out + [("content", held)]
            if self._in is None:
                if not (self._held.startswith((CHANNEL, START)) or _opens_header(self._held)):
                    self._plain = not self._headed
                    if not self._plain:  # between messages: what is there is the answer's
                        self._in = "content"
                    continue
                end = self._held.find(MESSAGE)
                if end < 0:
                    return out
                header = self._held[: end + len(MESSAGE)]
                self._held = self._held[len(header) :]
                self._headed = True
                channel = re.search(r"<\|channel\|>(\w+)", header)
                name = channel.group(1) if channel else ""
                self._in = "reasoning" if name == "analysis" else "content"
                if name not in ("analysis", "final"):
                    out.append(("content", header))
                continue
            end = self._held.find(END)
            if end < 0:
                safe = len(self._held) - _partial(self._held, END)
                body, self._held = self._held[:safe], self._held[safe:]
                return out + _pieces((self._in, body))
            out += _pieces((self._in, self._held[:end]))
            self._held, self._in = self._held[end + len(END) :], None
        return out

    def finish(self) -> list[Piece]:
        held, self._held = self._held, ""
        return _pieces((self._in or "content", held))


def _opens_header(text: str) -> bool:
    """Whether `text` may yet turn out to begin a header (it is short of either marker)."""
    return CHANNEL.startswith(text) or START.startswith(text)
