"""What a head learns from: the target's answers to a prompt set and the user's own text,
as the target saw them (`specrun.llama.capture.Sample`), kept in shards on disk.

A run's requests are a fixed list (prompts answered greedily and sampled, then text
chunks teacher-forced), whose fingerprint names the folder of its shards; each shard names
the requests it holds, so a run stopped while collecting goes on from the requests no shard
holds yet. A stop writes the answers finished so far as a shorter shard; a shard is
checked as it is read, and one that is not what a run writes is a one-line error.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
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
SHARD_SAMPLES = 32  # samples per shard (a stop writes those it has, fewer)
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
    """The samples collected so far, in `folder`: shard-NNNNN.npz files, numbered in the
    order they were written, each holding whole samples of distinct requests."""

    folder: Path

    def done(self) -> set[int]:
        done: set[int] = set()
        for shard in self._files():
            with _reading(shard) as arrays:
                done.update(_manifest(arrays)[0].tolist())
        return done

    def _files(self) -> list[Path]:
        return sorted(self.folder.glob("shard-*.npz"))

    def write(self, samples: Sequence[tuple[int, Sample]]) -> None:
        files = self._files()
        index = int(files[-1].stem.removeprefix("shard-")) + 1 if files else 0
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
        """Every sample, one per request (the first shard's where a stop at the wrong
        moment wrote one twice)."""
        samples: dict[int, Sample] = {}
        for shard in self._files():
            with _reading(shard) as arrays:
                requests, lengths, answers = _manifest(arrays)
                columns = [arrays[name] for name in _COLUMNS]  # each read once
                rows = int(lengths.sum())
                if [(len(c), c.ndim) for c in columns] != [(rows, n) for n in _DIMENSIONS]:
                    raise _Damaged(f"its arrays are not {rows} positions of samples")
                if columns[2].shape != columns[3].shape:
                    raise _Damaged("top ids and log probabilities of different shapes")
            tokens, features, top_ids, top_logprobs = columns
            ends = np.cumsum(lengths)
            for request, answer, end, length in zip(requests, answers, ends, lengths):
                start = end - length
                samples.setdefault(
                    int(request),
                    Sample(
                        tokens[start:end],
                        features[start:end],
                        top_ids[start:end],
                        top_logprobs[start:end],
                        int(answer),
                    ),
                )
        return list(samples.items())


_COLUMNS = ("tokens", "features", "top_ids", "top_logprobs")  # a row per position
_DIMENSIONS = (1, 2, 2, 2)  # of each column


class _Damaged(Exception):
    """Why a shard is not what a run writes."""


@contextmanager
def _reading(shard: Path) -> Iterator[np.lib.npyio.NpzFile]:
    """A shard's arrays; one that is cut off, damaged or not a shard is a one-line error."""
    try:
        arrays = np.load(shard, allow_pickle=False)
        if not isinstance(arrays, np.lib.npyio.NpzFile):
            raise _Damaged("not an archive of arrays")
        with arrays:
            yield arrays
    except Exception as error:  # zipfile's and numpy's parsers raise a dozen kinds on damage
        remedy = "remove it, and the same command collects its answers again"
        raise damaged(shard, error, remedy) from None


def damaged(path: Path, error: Exception, remedy: str) -> SpecrunError:
    """The one-line error for a training state file that is not what a run writes: the
    reader's first words on it, then what to do."""
    lines = (str(error) or type(error).__name__).splitlines()
    reason = lines[0] if len(lines) == 1 and len(lines[0]) <= 80 else f"{lines[0][:77]}..."
    return SpecrunError(f"{path} is damaged ({reason}): {remedy}")


def _manifest(arrays: np.lib.npyio.NpzFile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shard's requests, their lengths and where each answer starts, checked."""
    requests, lengths, answers = (arrays[name] for name in ("requests", "lengths", "answers"))
    if not all(a.ndim == 1 and a.dtype.kind in "iu" for a in (requests, lengths, answers)):
        raise _Damaged("its manifest is not three lists of integers")
    if not len(requests) == len(lengths) == len(answers) or not len(requests):
        raise _Damaged("its manifest's lists differ in length")
    if (requests < 0).any() or len(set(requests.tolist())) != len(requests):
        raise _Damaged("its requests are not distinct request numbers")
    if (lengths < 1).any() or (answers < 0).any() or (answers > lengths).any():
        raise _Damaged("a sample's length or answer start is out of range")
    return requests, lengths, answers


def collect(
    capture: Capture,
    wanted: Sequence[Request],
    shards: Shards,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> list[tuple[int, Sample]]:
    """Decode the requests no shard holds yet, a shard at a time, the answers finished so far
    written on a stop; all samples, by request."""
    done = shards.done()
    if any(i >= len(wanted) for i in done):
        raise SpecrunError(f"{shards.folder} holds requests this run does not make: remove it")
    todo = [i for i in range(len(wanted)) if i not in done]
    total = sum(len(r.tokens) + r.max_new for r in wanted)
    decoded = total - sum(len(wanted[i].tokens) + wanted[i].max_new for i in todo)
    progress(decoded, total)
    pending: list[tuple[int, Sample]] = []

    def count(n: int) -> None:
        nonlocal decoded
        decoded += n
        progress(decoded, total)

    try:
        for index, sample in capture.generate([wanted[i] for i in todo], count):
            pending.append((todo[index], sample))
            if len(pending) == SHARD_SAMPLES:
                shards.write(pending)
                pending = []
    except KeyboardInterrupt:
        if pending:  # the answers finished so far; those under way are not samples yet
            shards.write(pending)
        raise
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
