"""The models a server answers for: each by its id, loaded when a request first names it,
and let go again: the least recently used when the next one would not fit in memory (or
past `max_loaded`), and any left idle for `keep_alive` seconds. Loading and unloading run
in the threads that use the models (a generation's, an embedding request's), one at a time,
and a model in use (`acquire`d) never goes. Generation models load as an `Engine`, embedding
models (`--embedding-model`) as an `Embedder`: both share the memory, the order and the
limits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from specrun.context_overflow import Overflow
from specrun.engine import Engine
from specrun.llama.devices import gpu_free_bytes, system_memory_available
from specrun.llama.embedding import Embedder
from specrun.llama.footprint import estimate
from specrun.llama.model import DEFAULT_CTX
from specrun.llama.prompt_cache import PromptCache
from specrun.options import LoadOptions


class Closable(Protocol):
    def close(self) -> None: ...


Loaded = TypeVar("Loaded", bound=Closable)  # what a served model is in memory


@dataclass
class Served(Generic[Loaded]):
    """A model the server may answer for: its id (as requests name it), how to load it, and
    the files and options (the context and its slots) that say what loading it takes."""

    id: str
    load: Callable[[], Loaded]
    files: tuple[Path, ...] = ()
    aliases: tuple[str, ...] = ()  # other names requests may give it (its catalog alias)
    options: LoadOptions = LoadOptions()  # those `load` loads it with
    engine: Loaded | None = None  # loaded: an Engine, or an embedding model's Embedder
    last_used: float = field(default_factory=time.monotonic)
    in_use: int = 0  # generations running on it

    def bytes_needed(self) -> int:
        """Memory the model's files will take at its context and slots, by their GGUF headers."""
        total, n_ctx = 0, self.options.n_ctx or DEFAULT_CTX
        for path in self.files:
            try:
                total += estimate(path, n_ctx=n_ctx).for_sequences(self.options.parallel).total
            except (OSError, ValueError, KeyError):  # not a GGUF it can read: no estimate
                pass
        return total


class ModelPool:
    """The served models, by id; the first is the default, for requests that name none.
    `embedding`: the models that answer /v1/embeddings, and no generation."""

    def __init__(
        self,
        served: Iterable[Served[Engine]],
        *,
        embedding: Iterable[Served[Embedder]] = (),
        keep_alive: float | None = None,
        max_loaded: int = 0,
        prompt_cache: PromptCache | None = None,
        overflow: Overflow = "truncate",
        available: Callable[[], int] = lambda: system_memory_available() + gpu_free_bytes(),
    ) -> None:
        self.served = {model.id: model for model in served}
        self.embedding = {model.id: model for model in embedding}
        self.keep_alive = keep_alive  # None: for as long as the server runs
        self.max_loaded = max_loaded  # 0: as many as fit
        # The generation models' one prompt cache (--cache-ram), and what a conversation
        # longer than a model's context does (--context-overflow).
        self.prompt_cache = prompt_cache
        self.overflow = overflow
        self._available = available
        self._lock = threading.Lock()  # the generation threads change, the event loop reads
        self._loading = threading.Lock()  # one load or unload at a time

    @classmethod
    def of(cls, engine: Engine, model_id: str) -> ModelPool:
        """One model, loaded: what a server of one engine answers for."""
        return cls([Served(model_id, lambda: engine, engine=engine)])

    @property
    def ids(self) -> list[str]:
        return list(self.served)

    @property
    def default(self) -> str:
        return self.ids[0]

    @property
    def names(self) -> dict[str, str]:
        """Every name a request may give a model, to its id: the ids, then the aliases (the
        embedding models' too, which a generation request is refused by name)."""
        names = {model_id: model_id for model_id in self._models()}
        for model in self._models().values():
            names.update((a, model.id) for a in model.aliases if a and a not in names)
        return names

    def _models(self) -> dict[str, Served[Any]]:
        return {**self.served, **self.embedding}

    def loaded(self) -> list[str]:
        with self._lock:
            return [model.id for model in self._models().values() if model.engine is not None]

    def acquire(self, model_id: str) -> Engine:
        """In a generation thread: the model's engine, loaded now if it is not (after letting
        go of the least recently used others not in use where it would not fit), kept until
        `release`."""
        engine = self._acquire(self.served[model_id])
        engine.prompt_cache = self.prompt_cache  # whichever model it is, one bound for all
        return engine

    def acquire_embedder(self, model_id: str) -> Embedder:
        """As `acquire`, an embedding model's, in the thread of the request that embeds."""
        return self._acquire(self.embedding[model_id])

    def _acquire(self, model: Served[Loaded]) -> Loaded:
        with self._loading:
            if model.engine is None:
                self._make_room(model)
                engine = model.load()
                with self._lock:
                    model.engine = engine
            model.in_use += 1
            model.last_used = time.monotonic()
            return model.engine

    def release(self, model_id: str) -> None:
        with self._loading:
            model = self._models()[model_id]
            model.in_use -= 1
            model.last_used = time.monotonic()

    def _make_room(self, model: Served[Any]) -> None:
        needed = model.bytes_needed()
        while True:
            loaded = [m for m in self._models().values() if m.engine is not None]
            idle = sorted((m for m in loaded if not m.in_use), key=lambda m: m.last_used)
            full = self.max_loaded and len(loaded) >= self.max_loaded
            if not idle or not (full or needed > self._available()):
                return
            self._unload(idle[0])

    def unload_idle(self, now: float | None = None) -> list[str]:
        """In a generation thread: let go of the models idle for longer than keep_alive."""
        if self.keep_alive is None:
            return []
        with self._loading:
            now = time.monotonic() if now is None else now
            idle = [
                m
                for m in self._models().values()
                if m.engine is not None and not m.in_use and now - m.last_used >= self.keep_alive
            ]
            for model in idle:
                self._unload(model)
            return [model.id for model in idle]

    def _unload(self, model: Served[Any]) -> None:
        with self._lock:
            engine, model.engine = model.engine, None
        if engine is not None:
            engine.close()

    def close(self) -> None:
        for model in self._models().values():
            self._unload(model)

    def snapshot(self) -> list[dict[str, object]]:
        with self._lock:
            return [
                {"id": model.id, "loaded": model.engine is not None}
                for model in self._models().values()
            ]
