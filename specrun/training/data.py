"""What a head learns from: the target's answers to a prompt set and the user's own text,
as the target saw them (`specrun.llama.capture.Sample`), kept in shards on disk.

A run's requests are a fixed list (prompts answered greedily and sampled, then text
chunks teacher-forced), whose fingerprint names the folder of its shards; each shard names
the requests it holds, so a run stopped while collecting goes on from the requests no shard
holds yet.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

import numpy as np

from specrun.core.sampling import SamplingParams
from specrun.errors import SpecrunError
from specrun.llama.capture import Capture, Request, Sample
from specrun.llama.model import Model
from specrun.prompt import Message, prompt_tokens, render
from specrun.system.files import replaced_atomically
from specrun.system.textio import read_text

Template = Literal["chat", "raw"]
SHARD_SAMPLES = 32  # samples per shard: what a stop while collecting may lose
SAMPLED_TEMPERATURE = 0.8  # the second answer to each prompt, for variety beside greedy
HELD_OUT_EVERY = 16  # one request in this many is held out to measure acceptance


@dataclass(frozen=True)
class Prompt:
    text: str
    template: Template


def default_prompts() -> list[Prompt]:
    """The project's prompt set: chat, code and prose, for chat templates and raw text."""
    text = resources.files("specrun.training").joinpath("prompts.jsonl").read_text("utf-8")
    return _prompts(text, "prompts.jsonl")


def read_prompts(path: Path) -> list[Prompt]:
    """A JSONL prompt set: {"prompt": ..., "template": "chat" or "raw"} per line."""
    return _prompts(read_text(path, "prompts"), str(path))


def _prompts(text: str, name: str) -> list[Prompt]:
    prompts = []
    for number, line in _lines(text):
        try:
            entry = json.loads(line)
            template = entry.get("template", "chat")
            prompts.append(Prompt(str(entry["prompt"]), template))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise SpecrunError(
                f'{name}:{number}: expected {{"prompt": ..., "template": ...}}'
            ) from None
        if template not in ("chat", "raw"):
            raise SpecrunError(f"{name}:{number}: template is 'chat' or 'raw', not {template!r}")
    return prompts


def read_texts(model: Model, paths: Sequence[Path], length: int) -> list[list[int]]:
    """The user's text as token chunks of at most `length`: plain text files whole, JSONL
    lines with "text" (raw) or "messages" (a chat, rendered with the target's template)."""
    chunks: list[list[int]] = []
    for path in paths:
        content = read_text(path, "text")
        if path.suffix != ".jsonl":
            texts = [model.tokenize(content, add_special=True, parse_special=False)]
        else:
            texts = [_jsonl_tokens(model, path, i, line) for i, line in _lines(content)]
        for tokens in texts:
            chunks += [tokens[i : i + length] for i in range(0, len(tokens), length)]
    return [chunk for chunk in chunks if len(chunk) > 1]


def _lines(content: str) -> Iterable[tuple[int, str]]:
    return ((i, line) for i, line in enumerate(content.splitlines(), 1) if line.strip())


def _jsonl_tokens(model: Model, path: Path, number: int, line: str) -> list[int]:
    try:
        entry = json.loads(line)
        if "messages" in entry:
            messages = [Message(m["role"], m["content"]) for m in entry["messages"]]
            rendered = render(model, messages[:-1]) if messages[-1].role == "assistant" else []
            if rendered:  # the reply follows the rendered turns, as the target would write it
                reply = model.tokenize(messages[-1].content, add_special=False, parse_special=False)
                return rendered + reply
            return render(model, messages)
        return model.tokenize(entry["text"], add_special=True, parse_special=False)
    except (ValueError, KeyError, TypeError) as error:
        raise SpecrunError(
            f'{path}:{number}: expected {{"text": ...}} or {{"messages": [...]}} ({error})'
        ) from None


def requests(
    model: Model, prompts: Sequence[Prompt], texts: Sequence[list[int]], max_new: int
) -> list[Request]:
    """Every prompt answered greedily and sampled (requests 2i and 2i + 1), then every text
    chunk as it is."""
    tokens = [prompt_tokens(model, p.text, raw=p.template == "raw") for p in prompts]
    answers = [
        Request(t, max_new, _sampling(temperature, seed=i))
        for i, t in enumerate(tokens)
        for temperature in (0.0, SAMPLED_TEMPERATURE)
    ]
    return answers + [Request(chunk, 0, _sampling(0.0, seed=0)) for chunk in texts]


def _sampling(temperature: float, seed: int) -> SamplingParams:
    """The target's whole distribution at `temperature` (no top-k, top-p or min-p cut)."""
    return SamplingParams(temperature=temperature, top_k=0, top_p=1.0, min_p=0.0, seed=seed)


def fingerprint(wanted: Sequence[Request]) -> str:
    """Names a request list: shards of another (other prompts, text or lengths) are not reused."""
    digest = hashlib.sha256()
    for request in wanted:
        digest.update(np.asarray(request.tokens, np.int64).tobytes())
        digest.update(f"{request.max_new} {request.params};".encode())
    return digest.hexdigest()[:16]


@dataclass
class Shards:
    """The samples collected so far, in `folder`: shard-NNNNN.npz files."""

    folder: Path

    def done(self) -> set[int]:
        return {int(i) for shard in self._files() for i in np.load(shard)["requests"]}

    def _files(self) -> list[Path]:
        return sorted(self.folder.glob("shard-*.npz"))

    def write(self, samples: Sequence[tuple[int, Sample]]) -> None:
        index = len(self._files())
        self.folder.mkdir(parents=True, exist_ok=True)
        lengths = np.array([len(s.tokens) for _, s in samples])
        with replaced_atomically(self.folder / f"shard-{index:05d}.npz") as temporary:
            with temporary.open("wb") as file:
                np.savez(
                    file,
                    requests=np.array([i for i, _ in samples]),
                    lengths=lengths,
                    answers=np.array([s.answer for _, s in samples]),
                    tokens=np.concatenate([s.tokens for _, s in samples]),
                    features=np.concatenate([s.features for _, s in samples]),
                    top_ids=np.concatenate([s.top_ids for _, s in samples]),
                    top_logprobs=np.concatenate([s.top_logprobs for _, s in samples]),
                )

    def load(self) -> list[tuple[int, Sample]]:
        samples = []
        for shard in self._files():
            data = np.load(shard)
            ends = np.cumsum(data["lengths"])
            for i, (request, answer, end) in enumerate(
                zip(data["requests"], data["answers"], ends)
            ):
                start = end - data["lengths"][i]
                samples.append(
                    (
                        int(request),
                        Sample(
                            data["tokens"][start:end],
                            data["features"][start:end],
                            data["top_ids"][start:end],
                            data["top_logprobs"][start:end],
                            int(answer),
                        ),
                    )
                )
        return samples


def collect(
    capture: Capture,
    wanted: Sequence[Request],
    shards: Shards,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> list[tuple[int, Sample]]:
    """Decode the requests no shard holds yet, a shard at a time; all samples, by request."""
    done = shards.done()
    todo = [i for i in range(len(wanted)) if i not in done]
    total = sum(len(r.tokens) + r.max_new for r in wanted)
    decoded = total - sum(len(wanted[i].tokens) + wanted[i].max_new for i in todo)
    progress(decoded, total)
    pending: list[tuple[int, Sample]] = []

    def count(n: int) -> None:
        nonlocal decoded
        decoded += n
        progress(decoded, total)

    for index, sample in capture.generate([wanted[i] for i in todo], count):
        pending.append((todo[index], sample))
        if len(pending) == SHARD_SAMPLES:
            shards.write(pending)
            pending = []
    if pending:
        shards.write(pending)
    progress(total, total)  # answers that ended early left part of the estimate undecoded
    return sorted(shards.load(), key=lambda pair: pair[0])


def held_out(request: int, requests: int) -> bool:
    """Whether a request is kept out of training: one pair in HELD_OUT_EVERY, or the last of
    fewer (both answers to a prompt go together)."""
    pairs = (requests + 1) // 2
    if pairs < HELD_OUT_EVERY:
        return pairs > 1 and request // 2 == pairs - 1
    return request // 2 % HELD_OUT_EVERY == HELD_OUT_EVERY - 1
