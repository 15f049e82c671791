"""Prompts: messages with roles, rendered by the target's own chat template, as token ids.

The template comes from the GGUF metadata and is rendered by llama-cpp-python's
Jinja2 chat formatter, the same rendering Hugging Face uses. Only the template's own
markup becomes special tokens: what a message says is text, so a message cannot forge
a turn by writing `<|im_end|>` or `<|im_start|>system`.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from llama_cpp.llama_chat_format import Jinja2ChatFormatter
from llama_cpp.llama_types import ChatCompletionRequestMessage

from specrun.errors import SpecrunError
from specrun.llama.model import Model
from specrun.tools import (
    Tool,
    ToolCall,
    call_text,
    describes_tools,
    renders_calls,
    system_text,
    tool_format,
)

Role = Literal["system", "user", "assistant", "tool"]


@dataclass
class Message:
    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant's calls
    tool_call_id: str | None = None  # a tool's result: the call it answers


def render(
    model: Model,
    messages: list[Message],
    tools: tuple[Tool, ...] = (),
    options: Mapping[str, Any] | None = None,
) -> list[int]:
    """Token ids of a conversation, ending where the assistant's reply begins; `tools`, the
    functions it may call (`specrun.tools`); `options`, what else the template's render
    gets (`enable_thinking`, `reasoning_effort`: `specrun.reasoning.template_options`)."""
    messages = _with_tools(model, messages, tools)
    formatter = _formatter(model)
    if formatter is None:
        return model.tokenize(chat_text(model, messages), add_special=True, parse_special=False)
    offered = tools if describes_tools(model.chat_template) else ()
    prompt = _format(model, formatter, messages, offered, options)
    # The same conversation with each content a unique marker shows what is markup.
    nonce = secrets.token_hex(8)
    # (Private-use characters: no template filter trims, escapes or changes their case.)
    markers = {f"\ue000{nonce}.{i}\ue001": m.content for i, m in enumerate(messages)}
    skeleton = _format(
        model,
        formatter,
        [replace(m, content=marker) for m, marker in zip(messages, markers)],
        offered,
        options,
    )
    pieces = _markup_and_contents(prompt, skeleton, markers)
    if pieces is None:
        if any(_has_special_text(model, m.content) for m in messages):
            raise SpecrunError(
                f"{model.name}'s chat template rewrites the messages, so specrun cannot keep a "
                "special token's text in one of them from acting as markup; "
                "remove it or send the text `raw`"
            )
        pieces = [(prompt, True)]  # nothing in the messages could act as markup anyway
    tokens = ([model.bos] if model.add_bos else []) + _tokenize(model, pieces)
    # Templates often write the BOS text themselves; llama.cpp adds one too.
    if len(tokens) >= 2 and tokens[0] == tokens[1] == model.bos:
        del tokens[0]
    return tokens


def chat_text(
    model: Model, messages: list[Message], options: Mapping[str, Any] | None = None
) -> str:
    """The conversation as the chat template writes it, markup as text: a raw prompt for a
    tool that takes no messages (as `render` tokenizes it, where no content holds markup)."""
    formatter = _formatter(model)
    if formatter is None:  # no template: the turns as plain text, each on its own paragraph
        return "\n\n".join(m.content for m in messages)
    return _format(model, formatter, messages, (), options)


def _formatter(model: Model) -> Jinja2ChatFormatter | None:
    if model.chat_template is None:
        return None
    return Jinja2ChatFormatter(
        template=model.chat_template,
        bos_token=model.token_text(model.bos),
        eos_token=model.token_text(model.eos),
    )


def _format(
    model: Model,
    formatter: Jinja2ChatFormatter,
    messages: list[Message],
    tools: tuple[Tool, ...] = (),
    options: Mapping[str, Any] | None = None,
) -> str:
    try:
        offered: Any = [tool.as_openai() for tool in tools] or None
        return formatter(
            messages=[_request_message(m) for m in messages], tools=offered, **(options or {})
        ).prompt
    except Exception as error:  # a template may reject a conversation (e.g. no system role)
        raise SpecrunError(f"{model.name}'s chat template failed: {error}") from None


def _request_message(message: Message) -> ChatCompletionRequestMessage:
    """A message as the formatter takes it: one TypedDict per role; calls as Hugging Face's
    templates read them (the arguments an object)."""
    if message.role == "system":
        return {"role": "system", "content": message.content}
    if message.role == "user":
        return {"role": "user", "content": message.content}
    if message.role == "tool":
        return {
            "role": "tool",
            "content": message.content,
            "tool_call_id": message.tool_call_id or "",
        }
    if message.tool_calls:
        calls: Any = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.loads(call.arguments or "{}")},
            }
            for call in message.tool_calls
        ]
        return {"role": "assistant", "content": message.content, "tool_calls": calls}
    return {"role": "assistant", "content": message.content}


def _with_tools(model: Model, messages: list[Message], tools: tuple[Tool, ...]) -> list[Message]:
    """The conversation for a template that does not render tools itself: the tools in a
    system message, in the template's own call syntax (Hermes' where it has none); where it
    cannot render calls either, calls written in that syntax and results as user turns in
    <tool_response> tags."""
    template = model.chat_template
    asked = tools or any(m.tool_calls or m.role == "tool" for m in messages)
    if not asked or describes_tools(template):
        return messages
    fmt = tool_format(template)
    written: list[Message] = []
    for message in messages:
        if renders_calls(template):
            written.append(message)
        elif message.role == "tool":
            written.append(Message("user", f"<tool_response>\n{message.content}\n</tool_response>"))
        elif message.tool_calls:
            calls = call_text(message.tool_calls, fmt)
            written.append(Message("assistant", "\n".join(filter(None, [message.content, calls]))))
        else:
            written.append(message)
    if tools:
        told = system_text(list(tools), fmt)
        if written and written[0].role == "system":
            written[0] = Message("system", f"{written[0].content}\n\n{told}")
        else:
            written.insert(0, Message("system", told))
    return written


def _markup_and_contents(
    prompt: str, skeleton: str, markers: dict[str, str]
) -> list[tuple[str, bool]] | None:
    """`prompt` cut into (text, is_markup) pieces: the skeleton's markup, and each message's
    content as the template wrote it, as is or trimmed (Llama 3's and Gemma's `| trim`).
    None when the template changed a content some other way."""
    parts = re.split(
        "(" + "|".join(map(re.escape, markers)) + ")", skeleton
    )  # markup, marker, ..., markup
    pieces: list[tuple[str, bool]] = []
    position = 0
    for index, part in enumerate(parts):
        if index % 2 == 0:
            text, is_markup = part, True
        else:
            content, following = markers[part], parts[index + 1]
            forms = (
                form
                for form in (content, content.strip())
                if prompt.startswith(form + following, position)
            )
            text, is_markup = next(forms, None), False
            if text is None:
                return None
        if not prompt.startswith(text, position):
            return None
        pieces.append((text, is_markup))
        position += len(text)
    return pieces if position == len(prompt) else None


def _tokenize(model: Model, pieces: list[tuple[str, bool]]) -> list[int]:
    """Tokens of the pieces as llama.cpp tokenizes a whole prompt with parse_special (the
    text between two special tokens is one fragment; a special token may swallow the
    whitespace beside it), except that special tokens come from the markup only. So an
    ordinary conversation gets exactly the tokens it always got."""
    specials: list[int] = []  # the special token ids, in order
    texts = [""]  # the text before each special token, and after the last
    for text, is_markup in pieces:
        for part in _split_special(model, text) if is_markup else [text]:
            if isinstance(part, int):
                specials.append(part)
                texts.append("")
            else:
                texts[-1] += part
    tokens: list[int] = []
    for index, text in enumerate(texts):
        if index > 0:
            tokens.append(specials[index - 1])
            if model.strips_spaces(specials[index - 1])[1]:
                text = text.lstrip(_ASCII_SPACE)
        if index < len(specials) and model.strips_spaces(specials[index])[0]:
            text = text.rstrip(_ASCII_SPACE)
        if text:
            tokens += model.tokenize(text, add_special=False, parse_special=False)
    return tokens


_ASCII_SPACE = " \t\n\v\f\r"  # what llama.cpp's lstrip/rstrip remove (C's isspace)


def _split_special(model: Model, markup: str) -> list[str | int]:
    """Markup as text and special token ids, where llama.cpp's parse_special finds them."""
    special = {
        model.token_text(t): t
        for t in model.tokenize(markup, add_special=False, parse_special=True)
        if model.is_special(t)
    }
    if not special:
        return [markup]
    longest_first = sorted(
        special, key=len, reverse=True
    )  # llama.cpp tries longer token texts first
    parts = re.split("(" + "|".join(map(re.escape, longest_first)) + ")", markup)
    return [special[part] if index % 2 else part for index, part in enumerate(parts)]


def _has_special_text(model: Model, text: str) -> bool:
    return any(
        model.is_special(t) for t in model.tokenize(text, add_special=False, parse_special=True)
    )


def prompt_tokens(
    model: Model, text: str, *, system: str | None = None, raw: bool = False
) -> list[int]:
    """A one-shot prompt: as is with `raw` or without a template, else one user turn.

    Raw text is the user's exact prompt, their own template included: its special-token
    text becomes those tokens, as in llama.cpp and llama-cpp-python. A message's text
    never does (`render`)."""
    if raw:
        return model.tokenize(text, add_special=True, parse_special=True)
    messages = [Message("system", system)] if system else []
    return render(model, messages + [Message("user", text)])
