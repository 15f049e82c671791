"""Token sequences as the round loop passes them to models: one that only grows, and views
of it with a draft on the end, so a model compares only what is new since its last call."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if not n:
        return 0
    a, b = list(a[:n]), list(b[:n])
    if a == b:  # one comparison in C: the usual case, where one sequence extends the other
        return n
    return next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)


class Tokens(Sequence[int]):
    """A token sequence that only grows: a position, once written, never changes.

    So a Model that has held its first n tokens need compare only what follows
    (`Model.logits` with a `Continuation`): a round costs O(new tokens), not O(context).
    """

    def __init__(self, tokens: Iterable[int] = ()) -> None:
        self._items = list(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        self._items.extend(tokens)

    def then(self, tail: list[int]) -> Continuation:
        """These tokens followed by `tail` (a draft), without copying them."""
        return Continuation(self, len(self._items), tail)

    def but_last(self) -> Continuation:
        """All but the last token, without copying: what a cache holds when the last
        token's logits are still to be computed."""
        return Continuation(self, len(self._items) - 1, [])

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:  # a slice as a list
        return self._items[index]

    def __iter__(self) -> Iterator[int]:
        return iter(self._items)


@dataclass(frozen=True)
class Continuation(Sequence[int]):
    """The first `n` tokens of `base`, then `tail`."""

    base: Tokens
    n: int
    tail: list[int]

    def __len__(self) -> int:
        return self.n + len(self.tail)

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:  # a slice as a list
        if isinstance(index, slice):
            start, stop, step = index.indices(self.n + len(self.tail))
            if self.n <= start <= stop and step == 1:  # a round's usual slice: within the draft
                return self.tail[start - self.n : stop - self.n]
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            head = self.base[start : max(start, min(stop, self.n))]
            return head + self.tail[max(start - self.n, 0) : max(stop - self.n, 0)]
        i = range(len(self))[index]  # negative indices, and IndexError past the end
        return self.base[i] if i < self.n else self.tail[i - self.n]


def origin(ctx: Sequence[int]) -> Sequence[int]:
    """The sequence a draft source remembers having read ctx from: a view with nothing of its
    own (a prefix of `Tokens`) is its base's, anything else is itself."""
    return ctx.base if isinstance(ctx, Continuation) and not ctx.tail else ctx


def extends(ctx: Sequence[int], seen: list[int], source: Sequence[int] | None) -> bool:
    """Whether ctx begins with `seen`, the tokens a draft source read from `source` (`origin`).
    The loop passes one sequence that only grows, so where ctx comes from it only the seam is
    checked; any other sequence is compared in full, once, when it is first passed."""
    n = len(seen)
    if len(ctx) < n:
        return False
    if origin(ctx) is source:
        return n == 0 or ctx[n - 1] == seen[-1]
    return list(ctx[:n]) == seen
