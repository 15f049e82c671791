"""Several generations on one context: each in its own thread, each on its own sequence of
the models' KV caches, their model calls decoded together.

A `SequenceView` is one sequence of a `Model`, a `LanguageModel` for the round loop of one
slot. Its `logits` call waits in the `Gather` until every generation that takes part is
waiting too; then each model decodes all the calls waiting for it in one batch (the target
every slot's verify rows, the draft model every drafting slot's next step) and the calls
return. The loop itself is unchanged, so each slot's output is what plain decoding of its
request alone gives (greedy token for token but for batch numerics on near ties, as any
verify; sampled, by distribution).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, TypeVar, overload

import numpy as np

from specrun.core.sampling import Rows
from specrun.llama.blocks import NativeBlock
from specrun.llama.heads import NativeHead
from specrun.llama.model import Call, Model

FeedResult = tuple[np.ndarray, np.ndarray] | None  # what a head's pass gives (`Head.feed`)

# How long the gather waits for members away at a yield (their consumer has the event)
# once every other member waits: a front end hands an event on in microseconds, while a
# consumer that holds on to a stream (two streams interleaved in one thread) must not stall
# the others for good.
AWAY_GRACE_SECONDS = 0.005


class Member:
    """A generation taking part in a gather; `away` while its consumer has an event."""

    def __init__(self, gather: Gather) -> None:
        self._gather = gather

    @contextmanager
    def away(self) -> Iterator[None]:
        """The generation makes no call until this ends: the gather need not wait for it but
        a moment (`AWAY_GRACE_SECONDS`)."""
        self._gather._move_away(self, True)
        try:
            yield
        finally:
            self._gather._move_away(self, False)


class Gather:
    """Model calls from several threads, each decoded in one batch per model once every
    thread taking part (`member`) waits on one, or is away at a yield for longer than
    AWAY_GRACE_SECONDS.

    The decodes run in one thread of the gather's own: llama.cpp's OpenMP keeps a team of
    threads for each thread that calls it, spinning a while after each decode, and teams of
    several calling threads took the cores from each other (decodes twice as slow on two)."""

    def __init__(self) -> None:
        lock = threading.Lock()
        self._ready = threading.Condition(lock)  # the decoding thread waits on it
        self._done = threading.Condition(lock)  # the calling threads wait on it
        self._members = 0
        self._away: dict[int, float] = {}  # members whose consumer has an event: since when
        self._waiting: list[tuple[Model, Call]] = []
        self._jobs: list[Job[Any]] = []  # heads' passes, run in the decoding thread too
        self._served: set[int] = set()  # ids of calls whose rows (or error) are ready
        self._errors: dict[int, BaseException] = {}
        self._thread: threading.Thread | None = None
        self._closed = False

    @contextmanager
    def member(self) -> Iterator[Member]:
        """Take part for the duration: the gather waits for this thread's next call."""
        with self._ready:
            self._members += 1
        try:
            yield Member(self)
        finally:
            with self._ready:
                self._members -= 1
                self._wake_if_due()

    def call(self, model: Model, call: Call) -> Call:
        """Wait until every member waits, decode, and return the call with its rows."""
        self._wait_served(call, lambda: self._waiting.append((model, call)))
        return call

    def run(self, job: Job[_Result]) -> Job[_Result]:
        """Run `job` in the decoding thread, as a model call: once every member waits."""
        return self._wait_served(job, lambda: self._jobs.append(job))

    def _wait_served(self, item: _Item, enqueue: Callable[[], None]) -> _Item:
        with self._ready:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="specrun-batch", daemon=True
                )
                self._thread.start()
            enqueue()
            self._wake_if_due()
            while id(item) not in self._served:
                self._done.wait()
            self._served.discard(id(item))
            error = self._errors.pop(id(item), None)
        if error is not None:
            raise error
        return item

    def close(self) -> None:
        """End the decoding thread (once no member is left)."""
        with self._ready:
            self._closed = True
            self._ready.notify()
        if self._thread is not None:
            self._thread.join()

    def _move_away(self, member: Member, away: bool) -> None:
        with self._ready:
            if away:
                self._away[id(member)] = time.monotonic()
            else:  # a grace the decoding thread counts for it ends at its deadline
                del self._away[id(member)]
            self._wake_if_due()

    def _all_waiting(self) -> bool:
        waiting = len(self._waiting) + len(self._jobs)
        return bool(waiting) and waiting >= self._members

    def _due(self) -> bool:
        """Whether every member waits or is away: a batch now, or after the grace."""
        waiting = len(self._waiting) + len(self._jobs)
        return bool(waiting) and waiting + len(self._away) >= self._members

    def _wake_if_due(self) -> None:
        if self._due():
            self._ready.notify()

    def _serve(self) -> None:
        with self._ready:
            while True:
                self._wait_for_batch()
                if self._closed:
                    return
                self._decode()

    def _wait_for_batch(self) -> None:
        """Holding the lock: until every member waits, or those that do not are away and have
        been for AWAY_GRACE_SECONDS, or the gather closes."""
        while not self._closed and not self._all_waiting():
            if self._due():  # each member that does not wait is away: wait for the latest
                remaining = max(self._away.values()) + AWAY_GRACE_SECONDS - time.monotonic()
                if remaining <= 0:
                    return
                self._ready.wait(remaining)
            else:
                self._ready.wait()

    def _decode(self) -> None:
        """Holding the lock: the heads' passes, each model's waiting calls in one batch, then
        wake their threads."""
        waiting, self._waiting = self._waiting, []
        jobs, self._jobs = self._jobs, []
        for job in jobs:
            try:
                job.run()
            except BaseException as error:  # its thread raises it
                self._errors[id(job)] = error
        self._served.update(id(job) for job in jobs)
        by_model: dict[int, tuple[Model, list[Call]]] = {}
        for model, call in waiting:
            by_model.setdefault(id(model), (model, []))[1].append(call)
        for model, calls in by_model.values():
            try:
                model.decode_calls(calls)
            except BaseException as error:  # each call's thread raises it: a failed decode
                for call in calls:
                    self._errors[id(call)] = error
        self._served.update(id(call) for _, call in waiting)
        self._done.notify_all()


_Result = TypeVar("_Result")


class Job(Generic[_Result]):
    """A head's or a block draft's pass for the gather's decoding thread: `work`, then what it
    returned (None until it ran)."""

    def __init__(self, work: Callable[[], _Result]) -> None:
        self.work = work
        self.result: _Result | None = None

    def run(self) -> None:
        self.result = self.work()


_Item = TypeVar("_Item", Call, Job[Any])


class HeadView:
    """One slot's head (`Head`), its passes run in the gather's decoding thread once every
    generation waits, as the models' calls are: a process decodes from one thread (DESIGN.md,
    Slots)."""

    def __init__(self, head: NativeHead, gather: Gather) -> None:
        self.head = head
        self.gather = gather
        self.name, self.kind, self.offset, self.path = head.name, head.kind, head.offset, head.path

    def truncate(self, position: int) -> None:
        self.head.truncate(position)  # a cache operation, no pass: in the slot's own thread

    def feed(
        self, position: int, tokens: Sequence[int], states: np.ndarray, *, own: bool, output: bool
    ) -> FeedResult:
        def work() -> FeedResult:
            return self.head.feed(position, tokens, states, own=own, output=output)

        return self.gather.run(Job(work)).result


class BlockView:
    """One slot's block draft (`Block`), its passes run in the gather's decoding thread once
    every generation waits, as a head's are (HeadView)."""

    def __init__(self, block: NativeBlock, gather: Gather) -> None:
        self.block = block
        self.gather = gather
        self.name, self.kind, self.path = block.name, block.kind, block.path
        self.longest = block.longest

    def truncate(self, position: int) -> None:
        self.block.truncate(position)  # a cache operation, no pass: in the slot's own thread

    def inject(self, position: int, states: np.ndarray) -> None:
        self.gather.run(Job(lambda: self.block.inject(position, states)))

    def draft(self, position: int, anchor: int, n: int) -> np.ndarray:
        job = self.gather.run(Job(lambda: self.block.draft(position, anchor, n)))
        assert job.result is not None  # run raises what the pass raised
        return job.result


class SequenceView:
    """One sequence of a model's KV cache, for one slot's round loop (`LanguageModel`)."""

    def __init__(self, model: Model, seq_id: int, gather: Gather) -> None:
        self.model = model
        self.cache = model.caches[seq_id]
        self.gather = gather
        self.name = model.name
        self.n_vocab = model.n_vocab
        self.n_ctx = model.n_ctx
        self.n_ctx_train = model.n_ctx_train
        self.first_of_shape = False
        self.shared_rows = self.shared_with = 0  # of the last decode: the other slots'
        self.is_eog = model.is_eog
        self.piece = model.piece

    @property
    def n_evaluated(self) -> int:
        return self.cache.n_evaluated

    @property
    def tokens(self) -> Sequence[int]:
        return self.cache.tokens

    @overload
    def logits(
        self, seq: Sequence[int], last: int = 1, *, view: bool = False, top: None = None
    ) -> np.ndarray: ...

    @overload
    def logits(
        self, seq: Sequence[int], last: int = 1, *, view: bool = False, top: int
    ) -> Rows: ...

    def logits(
        self, seq: Sequence[int], last: int = 1, *, view: bool = False, top: int | None = None
    ) -> Rows:
        """Model.logits for this sequence, decoded with the other slots' calls."""
        call = self.gather.call(self.model, Call(self.cache, seq, last, view, top))
        self.first_of_shape = call.first_of_shape
        self.shared_rows, self.shared_with = call.shared_rows, call.shared_with
        assert call.rows is not None or not last
        return call.rows if call.rows is not None else np.empty((0, self.n_vocab), np.float32)
