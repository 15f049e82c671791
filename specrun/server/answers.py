"""One answer of a job as the parts every API family renders (OpenAI's chat and completions,
and the others beside them): its text as it comes, with each token's log-probabilities where
asked, the tool calls it made (read back in the model's syntax, held while they may be
arriving), and how it ended. Each family only renders these parts in its own shapes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

from specrun.core.sampling import TokenLogprob
from specrun.prompt import chat_text
from specrun.reasoning import Piece, Splitter, reasoning_format, splitter
from specrun.server.worker import Job, Outcome
from specrun.tools import CallStream, ToolCall, tool_format

# How an answer ended, in OpenAI's words: a worker's outcome, or calls made.
Finish = Outcome | Literal["tool_calls"]


@dataclass(frozen=True)
class TextPart:
    """Answer text that can go out now, and the log-probabilities of the tokens it came from
    (what they read may still be held, as the start of what may be a call)."""

    text: str
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class ReasoningPart:
    """The model's thinking, apart from its answer (a reasoning model's, where its template
    says how it thinks)."""

    text: str


@dataclass(frozen=True)
class CallsPart:
    """The calls the answer made: its last part but the finish."""

    calls: tuple[ToolCall, ...]


AnswerPart = TextPart | ReasoningPart | CallsPart


@dataclass
class Answer:
    """A whole answer: what `parts` yields, gathered."""

    text: str = ""
    reasoning: str = ""
    calls: tuple[ToolCall, ...] = ()
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish: Finish = "stop"


def _calling(job: Job) -> CallStream | None:
    """Where the request offered tools, what reads the answer for calls."""
    if not job.request.calls_tools or job.engine is None:
        return None
    request = job.request
    most = None if request.parallel_tool_calls else 1
    return CallStream(tool_format(job.engine.target.chat_template), request.tools, most)


def _thinking(job: Job) -> Splitter | None:
    """Where a chat request went to a reasoning model, what splits its thinking from its
    answer (a raw prompt's text is the client's own: never split). Whether the prompt left
    the thought open is read from the prompt's text, rendered again (one template render: the
    worker keeps only the prompt's tokens)."""
    request, engine = job.request, job.engine
    if not isinstance(request.prompt, list) or engine is None:
        return None
    target = engine.target
    form = reasoning_format(target.chat_template)
    if form == "none":
        return None
    prompt = chat_text(target, request.prompt, request.template_options(engine))
    return splitter(form, prompt)


def _split(pieces: list[Piece]) -> tuple[list[ReasoningPart], str]:
    """Thinking pieces as parts, and the answer's text among them."""
    thought = [ReasoningPart(text) for kind, text in pieces if kind == "reasoning"]
    return thought, "".join(text for kind, text in pieces if kind == "content")


async def parts(job: Job) -> AsyncIterator[AnswerPart]:
    """One answer's parts as its rounds come (after its Prefill, which the handler awaited):
    its thinking apart where its model reasons, text, then the calls where it made any (read
    in the answer's text, the thinking taken out). `finish(job, parts)` says how it ended."""
    thinking, calling = _thinking(job), _calling(job)
    while (event := await job.next_round()) is not None:
        thought, text = _split(thinking.feed(event.text)) if thinking else ([], event.text)
        for part in thought:
            yield part
        text = calling.feed(text) if calling else text
        if text or event.logprobs:
            yield TextPart(text, event.logprobs)
    thought, text = _split(thinking.finish()) if thinking else ([], "")
    for part in thought:
        yield part
    calls: list[ToolCall] = []
    if calling:
        text = calling.feed(text)
        rest, calls = calling.finish()
        text += rest
    if text:
        yield TextPart(text)
    if calls:
        yield CallsPart(tuple(calls))


def finish(job: Job, made_calls: bool) -> Finish:
    """How the answer ended, once its parts are read: `tool_calls` where it made calls, else
    the worker's outcome (a 503 where the server stopped it)."""
    return "tool_calls" if made_calls else job.finish_reason()


async def whole(job: Job) -> Answer:
    """The answer read to its end."""
    answer = Answer()
    text: list[str] = []
    async for part in parts(job):
        if isinstance(part, TextPart):
            text.append(part.text)
            answer.logprobs.extend(part.logprobs)
        elif isinstance(part, ReasoningPart):
            answer.reasoning += part.text
        else:
            answer.calls = part.calls
    answer.text = "".join(text).strip() if answer.calls else "".join(text)
    answer.finish = finish(job, bool(answer.calls))
    return answer
