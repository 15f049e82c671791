"""llama-server's /infill: the middle between a prefix and a suffix (the prompt made by
`specrun.fim`), generated as every answer is, drafts and all, and answered in llama-server's
own completion shape (not OpenAI's): whole, or streamed as server-sent events of `content`
pieces, the last with `stop` true and the figures, and no `[DONE]`, as llama-server ends it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Literal

from specrun.core.text import Detokenizer, ending_stop
from specrun.server import answers
from specrun.server.requests import ApiError
from specrun.server.worker import Job

PATH = "/infill"
ID_PREFIX = "infill-"
# llama-server's stop_type: the model's end of generation, a stop string, or the token limit.
StopType = Literal["eos", "word", "limit"]


def _ending(job: Job, finish: answers.Finish) -> tuple[StopType, str]:
    """How the answer ended, and the stop string that ended it (else "")."""
    if finish == "length":
        return "limit", ""
    engine, stops = job.engine, job.request.stop
    matched = (
        ending_stop(Detokenizer(engine.target), stops, job.stats.committed)
        if stops and engine is not None
        else None
    )
    return ("word", matched) if matched else ("eos", "")


def _figures(job: Job) -> dict[str, object]:
    return {
        "index": 0,
        "tokens": [],  # llama-server's too, unless asked for (`return_tokens`)
        "id_slot": -1,
        "tokens_evaluated": job.stats.prompt_tokens,
    }


def _final(job: Job, content: str, finish: answers.Finish, whole: str) -> dict[str, object]:
    """The last object: the answer's `content` (all of it, or "" after streamed pieces), how it
    ended, and the figures (`specrun`: the job's, as every answer has them)."""
    stop_type, word = _ending(job, finish)
    return {
        **_figures(job),
        "content": content,
        "stop": True,
        "model": job.request.model,
        "tokens_predicted": job.stats.generated,
        "stop_type": stop_type,
        "stopping_word": word,
        "truncated": False,
        "has_new_line": "\n" in whole,
        "specrun": job.stats.as_dict(),
    }


async def whole(job: Job) -> dict[str, object]:
    """The answer read to its end, as llama-server's /infill answers."""
    answer = await answers.whole(job)
    return _final(job, answer.text, answer.finish, answer.text)


async def events(job: Job) -> AsyncIterator[str]:
    """The answer's pieces as they come, as server-sent events; an error after the answer
    began is its last event."""
    text = ""
    try:
        async for part in answers.parts(job):
            if isinstance(part, answers.TextPart) and part.text:
                text += part.text
                yield _sse({**_figures(job), "content": part.text, "stop": False})
        yield _sse(_final(job, "", answers.finish(job, False), text))
    except ApiError as error:
        yield _sse(error.body())


def _sse(record: dict[str, object]) -> str:
    return f"data: {json.dumps(record)}\n\n"
