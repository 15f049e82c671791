"""Block drafts (DFlash, DSpark): a whole draft in one pass of a small non-causal model.

The draft's cache holds, at each position P the target has decoded, a projection of the
target's hidden states there (its layer inputs, `HiddenRows`), written by the target's own
passes: no target pass of its own. A round then decodes one block: the last committed token
(the anchor, which the target has not decoded yet) at its position, followed by mask tokens,
all attending to each other and to the cache. The rows at the masks (DFlash), or from the
anchor on (DSpark's anchor-first layout), are the draft's guesses for the next positions,
each a distribution over the vocabulary.

Exactness. Row i's distribution q_i is a function of the committed text alone: it does not
see the tokens drafted before it (the block holds masks there). Drafting samples d_i from
q_i, after the target's transform, the bias and penalties for the text and the drafts
before it, and the constraint's state after them, so q_i is fixed before d_i is drawn and
depends only on what is known then. That is all the accept/resample rule asks of a proposal:
at position i, given d_1..d_{i-1} accepted, accepting d_i with probability
min(1, p_i(d_i) / q_i(d_i)) and otherwise drawing from norm(max(0, p_i - q_i)) yields p_i,
whatever q_i is, so the committed text is distributed as the target's (DESIGN.md, Block
drafts). The block's own cache entries are dropped after each pass, and the target's rows of
rejected drafts are never taken in (they are cut back with the target's cache), so the
draft's state is a function of the committed text.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np

from specrun.core.constraint import Constraint
from specrun.core.drafting import DraftKind, Proposal
from specrun.core.gamma import GammaShape
from specrun.core.heads import SEAM_ROWS, HiddenRows
from specrun.core.sampling import Draws, SamplingParams
from specrun.core.sequence import common_prefix_length, extends, origin


class Block(Protocol):
    """A block draft's network and cache (a DFlash or DSpark GGUF)."""

    name: str
    kind: Literal["dflash", "dspark"]
    longest: int  # the most tokens one pass drafts (the trained block's)

    def truncate(self, position: int) -> None:
        """Drop the cache from `position` on."""

    def inject(self, position: int, states: np.ndarray) -> None:
        """Put the target's rows of positions position, position + 1, ... in the cache."""

    def draft(self, position: int, anchor: int, n: int) -> np.ndarray:
        """One pass over the block [anchor, masks] at `position` on: the logits of the n
        positions after the anchor's, one row each, valid until the next call. The block's own
        cache entries are gone after it."""


class BlockDraft:
    """Drafts up to the block's length in one pass of a block draft fed by the target's
    hidden states, with the target's sampling transform; like a draft model, stops early
    below `p_min` confidence."""

    def __init__(self, block: Block, rows: HiddenRows, target_vocab: int, p_min: float = 0.0):
        self.block = block
        self.rows = rows
        self.name = block.name
        self.kind: DraftKind = block.kind
        self.longest = block.longest
        self.gamma_shape = GammaShape(block=block.longest)  # auto prices it per pass, by position
        self.target_vocab = target_vocab
        self.p_min = p_min
        self._tokens: list[int] = []  # the committed text whose positions the cache holds
        self._source: Sequence[int] | None = None  # the sequence they were taken from
        self._start = 0  # the cache holds the rows of positions [start, len(_tokens))
        self._expected = 0  # the new rows a round leaves: more are a catch-up, timed apart

    def prefill(self, ctx: Sequence[int]) -> None:
        self._take_in(ctx, len(ctx))
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
        start = time.perf_counter()
        anchor = len(ctx) - 1  # the last committed token's position: the target has not seen it
        if anchor - len(self._tokens) > self._expected:  # plain rounds went by, or no prefill
            self._take_in(ctx, anchor - self._expected)
            proposal.catch_up_seconds = time.perf_counter() - start
        taken = self._take_in(ctx, anchor)
        n = min(n, self.longest)
        self._expected = 1
        if not taken or n == 0:  # no rows for the newest positions: nothing to draft from
            return proposal
        logits = self.block.draft(anchor, ctx[anchor], n)
        allowed = constraint.fork() if constraint is not None else None
        for row in logits:
            if not proposal.draw(row[: self.target_vocab], ctx, params, rng, allowed, self.p_min):
                break
        self._expected += len(proposal.tokens)
        return proposal

    def _take_in(self, ctx: Sequence[int], stop: int) -> bool:
        """Put the target's rows of positions [held, stop) in the cache, after dropping those
        of text ctx no longer shares (a position's row depends on the text up to it); False
        where the target has no rows up to `stop`."""
        if not extends(ctx, self._tokens, self._source):
            del self._tokens[common_prefix_length(self._tokens, ctx) :]
        self._source = origin(ctx)
        held = len(self._tokens)
        first = max(held, self.rows.start)
        self.block.truncate(held)
        if first > held or held <= self._start:
            # The target no longer keeps the rows of [held, first), or the cache holds nothing:
            # a cache's positions cannot skip any, so it starts over from the rows there are.
            self.block.truncate(0)
            self._start = first
        if stop > self.rows.end or first > stop:
            return False
        if first < stop:
            self.block.inject(first, self.rows.rows(first, stop))
        self._tokens.extend(ctx[held:stop])
        self.rows.release(stop - SEAM_ROWS)
        return True
