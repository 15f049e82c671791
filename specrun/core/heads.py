"""Drafts from the target's own hidden states: EAGLE-3 heads and MTP layers.

A head reads, for each position P of the committed text, the target's hidden state there
(h_P) with the token that followed it (t_{P+1}), and predicts t_{P+2}. The target
computes h_P in the pass that verified t_P, so a head costs no target pass of its own:
the target keeps the rows of the positions it decoded (`HiddenRows`), and each round the
head takes in those of the newly committed positions, then drafts by feeding itself its
own output in place of the target's rows. Rejected drafts are never taken in: their rows
are dropped with the target's cache, and the head's cache is cut back to the committed
pairs before it takes in new ones, so its state is a function of the committed text.

The round loop sees a `HeadDraft` as any other draft source: proposals with the
distribution q they were drawn from, verified by the same accept/resample rule.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np

from specrun.core.constraint import Constraint
from specrun.core.drafting import DraftKind, Proposal
from specrun.core.sampling import Draws, SamplingParams
from specrun.core.sequence import common_prefix_length, extends, origin

# Rows kept behind the last taken in: a new turn or an edited text that leaves the old one
# within them needs the row before the first new token, which the target does not decode again.
SEAM_ROWS = 16


class HiddenRows:
    """The target's hidden-state rows of the positions it decoded, kept until a head has
    taken them in: positions [start, end), one row of `width` floats each.

    The target writes each pass's rows and cuts them back with its cache; the head
    releases what it took in. At most `capacity` rows are kept (a long stretch of plain
    decoding drops the oldest; a head then goes on from the rows that are left).
    """

    def __init__(self, width: int, capacity: int) -> None:
        self.width = width
        self._rows = np.empty((capacity, width), np.float32)
        self.start = self.end = 0
        self._first = 0  # the row that holds position `start`

    def truncate(self, position: int) -> None:
        """Forget the rows of positions from `position` on (the cache dropped them)."""
        if position <= self.start:
            self.start = self.end = position
            self._first = 0
        self.end = min(self.end, position)

    def write(self, position: int, *blocks: np.ndarray) -> None:
        """Keep the rows of positions position, position + 1, ... (a pass's output), given
        as column blocks side by side (three layers' inputs for EAGLE-3)."""
        self.truncate(position)
        if position > self.end:  # positions were decoded without rows: start over here
            self.start = self.end = position
            self._first = 0
        n, held = len(blocks[0]), self.end - self.start
        capacity = len(self._rows)
        if self._first + held + n > capacity:
            keep = min(held, capacity - n)  # the newest rows that fit beside the new ones
            self._rows[:keep] = self._rows[self._first + held - keep : self._first + held]
            self.start, self._first = self.end - keep, 0
            held = keep
        column = 0
        for block in blocks:
            width = block.shape[1]
            self._rows[self._first + held : self._first + held + n, column : column + width] = block
            column += width
        self.end += n

    def rows(self, start: int, end: int) -> np.ndarray:
        """The rows of positions [start, end), all held: a view, valid until the next write."""
        assert self.start <= start <= end <= self.end, (start, end, self.start, self.end)
        first = self._first + start - self.start
        return self._rows[first : first + end - start]

    def release(self, position: int) -> None:
        """Positions before `position` are no longer needed."""
        position = min(max(position, self.start), self.end)
        self._first += position - self.start
        self.start = position


class Head(Protocol):
    """A head's own network and cache (an EAGLE-3 GGUF, or a model's MTP layers)."""

    name: str
    kind: Literal["eagle3", "mtp"]
    # The head's cache position of pair P: EAGLE-3 puts (t_{P+1}, h_P) at P, MTP at P + 1.
    offset: int

    def truncate(self, position: int) -> None:
        """Drop the head's cache from `position` on."""

    def feed(
        self, position: int, tokens: Sequence[int], states: np.ndarray, *, own: bool, output: bool
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Decode the pairs (tokens[i], states[i]) at positions position + i: the target's
        rows (`own` False; an EAGLE-3 head projects them first) or the head's own output
        (`own` True). With `output`, the last pair's logits and the state it feeds itself
        next, both valid until the next call."""


class HeadDraft:
    """Drafts γ tokens from a head fed by the target's hidden states, with the target's
    sampling transform; like a draft model, stops early below `p_min` confidence."""

    def __init__(self, head: Head, rows: HiddenRows, target_vocab: int, p_min: float = 0.0) -> None:
        self.head = head
        self.rows = rows
        self.name = head.name
        self.kind: DraftKind = head.kind
        self.target_vocab = target_vocab
        self.p_min = p_min
        # The committed tokens the head's pairs use: pair P holds tokens[P + 1], so the head
        # holds the pairs [0, len(tokens) - 1) (none while tokens has at most one token).
        self._tokens: list[int] = []
        self._source: Sequence[int] | None = None  # the sequence they were taken from
        self._start = 0  # the first pair in the head's cache: [start, held) are
        self._expected = 0  # the new pairs a round leaves: more are a catch-up, timed apart

    @property
    def held(self) -> int:
        return max(len(self._tokens) - 1, 0)

    def prefill(self, ctx: Sequence[int]) -> None:
        self._take_in(ctx, output=False)
        self._expected = 2  # the prompt's last token, and the first answer token

    def propose(
        self,
        ctx: Sequence[int],
        n: int,
        params: SamplingParams,
        rng: Draws,
        constraint: Constraint | None = None,
    ) -> Proposal:
        proposal = Proposal()
        allowed = constraint.fork() if constraint is not None else None
        start = time.perf_counter()
        pending = len(ctx) - 1 - self.held
        if pending > self._expected:  # plain rounds went by, or the prompt was not prefilled
            self._take_in(ctx, output=False, stop=len(ctx) - 1 - max(self._expected, 1))
            proposal.catch_up_seconds = time.perf_counter() - start
        taken = self._take_in(ctx, output=True)
        self._expected = 1
        if taken is None:  # no rows for the newest positions: nothing to draft from
            return proposal
        logits, state = taken
        position = len(ctx) - 1 + self.head.offset  # the pair (d_1, the head's own state)
        for i in range(n):
            if not proposal.draw(
                logits[: self.target_vocab], ctx, params, rng, allowed, self.p_min
            ):
                break
            self._expected += 1
            if i + 1 < n:
                token = proposal.tokens[-1]
                fed = self.head.feed(position + i, [token], state[None], own=True, output=True)
                assert fed is not None
                logits, state = fed
        return proposal

    def _take_in(
        self, ctx: Sequence[int], *, output: bool, stop: int | None = None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Put the committed pairs [held, stop) in the head's cache (stop: all that ctx
        completes, the last being its last token's); with `output`, the last pair's
        logits and state, or None where the target has no rows for them."""
        stop = len(ctx) - 1 if stop is None else stop
        if not extends(
            ctx, self._tokens, self._source
        ):  # another text: keep the pairs it still shares
            del self._tokens[common_prefix_length(self._tokens, ctx) :]
        self._source = origin(ctx)
        first = max(self.held, self.rows.start)
        self.head.truncate(self.held + self.head.offset)  # the last round's drafts go
        if first > self.held:
            # The target no longer keeps the rows of the pairs [held, first), and a cache's
            # positions cannot skip any: the head starts over from the rows there are.
            self.head.truncate(0)
            self._start = first
        elif self.held <= self._start:  # nothing is left in the head's cache
            self._start = first
        if stop > self.rows.end or first >= stop:
            return None
        fed = self.head.feed(
            first + self.head.offset,
            ctx[first + 1 : stop + 1],
            self.rows.rows(first, stop),
            own=False,
            output=output,
        )
        self._tokens.extend(ctx[len(self._tokens) : stop + 1])
        self.rows.release(stop - SEAM_ROWS)
        return fed
