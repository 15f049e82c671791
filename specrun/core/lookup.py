"""Prompt lookup: draft tokens copied from earlier in the text, free to compute.

Its proposals carry no distribution: verification treats each as a point mass.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from specrun.core.constraint import Constraint
from specrun.core.drafting import DraftKind, Proposal, allowed_prefix, as_proposal
from specrun.core.sampling import Draws, SamplingParams
from specrun.core.sequence import extends, origin
from specrun.core.trees import DraftTree, Occurrences, grow
from specrun.errors import OptionError

CANDIDATES = 8  # earlier occurrences of the key weighed per round (the most recent ones)
MATCH_CAP = 32  # how far back a match is extended; beyond it, every match is as good
# A tree's nodes whose estimated probability (the share of the occurrences that vote for each
# step, multiplied) is below this are left out: SuffixDecoding's `min_token_prob`.
TREE_MIN_PROBABILITY = 0.1


class LookupDraft:
    """Prompt lookup: find the last n tokens (n from `ngram_max` down to `ngram_min`)
    earlier in the prompt and the answer, and propose what followed them.

    Rules taken from llama.cpp's n-gram drafts (common/ngram-map.cpp, ngram-mod.cpp):
    - continuation counts (ngram-map-k4v): the recent occurrences vote on the next
      token, and a split vote (the winner less than twice the rest) proposes nothing;
    - longer matches preferred: among the winner's occurrences, the one whose match
      with the text extends furthest back, then the most recent;
    - track record (ngram-map-k): after a draft from a key was cut short at k accepted
      tokens, the next draft from that key has at most k + 1;
    - drafts that go on past the end of the text (ngram-mod predicts each token from the
      ones before it, drafted ones included): a copy that reaches the end continues from
      its own start.
    Single-token keys are mostly wrong, and a rejected proposal still widens the
    verify, so by default a key needs two tokens.

    Free to compute, so it pays wherever answers repeat their input: code edits,
    extraction, quoting summaries. An index of n-gram -> where its continuations start
    grows with the sequence, so a round costs O(new tokens).
    """

    name = "lookup"
    kind: DraftKind = "lookup"

    def __init__(
        self, ngram_max: int = 3, ngram_min: int = 2, max_tokens: int = 10, leaves: int = 1
    ) -> None:
        """`leaves` > 1: drafts as token trees of that many branches where the target verifies
        trees (`propose_tree`)."""
        if not 1 <= ngram_min <= ngram_max:
            raise OptionError(f"`min_ngram` ({ngram_min}) must lie in 1..`ngram` ({ngram_max})")
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self.max_tokens = max_tokens
        self.leaves = leaves
        self._restart()

    def _restart(self) -> None:
        self._tokens: list[int] = []  # a copy of the sequence indexed so far
        self._source: Sequence[int] | None = None  # the caller's sequence it was copied from
        self._index: dict[
            tuple[int, ...], list[int]
        ] = {}  # n-gram -> continuation starts, ascending
        self._limits: dict[tuple[int, ...], int] = {}  # key -> most tokens its next draft proposes
        self._last: tuple[tuple[int, ...], list[int]] | None = (
            None  # the last draft's key and tokens
        )

    def prefill(self, ctx: Sequence[int]) -> None:
        self._update(ctx)

    def _update(self, ctx: Sequence[int]) -> int:
        """Index every n-gram of ctx that has a continuation (all but the last position);
        return how many tokens were new."""
        if not extends(
            ctx, self._tokens, self._source
        ):  # a new conversation or an edited one: start over
            self._restart()
        seen = len(self._tokens)
        new = list(ctx[seen:])
        self._score_last_draft(new)
        self._tokens.extend(new)
        # A prefix view of an append-only sequence (the prompt but its last token) stands
        # for that sequence: the rounds that pass it in full then check only the seam.
        self._source = origin(ctx)
        tokens = self._tokens
        for end in range(max(seen - 1, 0), len(tokens) - 1):  # n-grams ending at `end`
            for n in range(self.ngram_min, self.ngram_max + 1):
                if end + 1 >= n:
                    self._index.setdefault(tuple(tokens[end + 1 - n : end + 1]), []).append(end + 1)
        return len(new)

    def _score_last_draft(self, new: list[int]) -> None:
        """The tokens that came after the last draft say how far it was right: a draft cut
        short limits its key's next one to what was accepted and one more."""
        if self._last is None:
            return
        key, drafted = self._last
        self._last = None
        accepted = next(
            (i for i, (d, t) in enumerate(zip(drafted, new)) if d != t), min(len(drafted), len(new))
        )
        if accepted < len(drafted) and accepted < len(new):
            self._limits[key] = accepted + 1
        else:
            self._limits.pop(key, None)

    def propose(
        self,
        ctx: Sequence[int],
        n: int,
        params: SamplingParams,
        rng: Draws,
        constraint: Constraint | None = None,
    ) -> Proposal:
        """A continuation seen before, up to its first token `constraint` refuses."""
        start = time.perf_counter()
        new = self._update(ctx)
        indexed = time.perf_counter() - start
        proposal = Proposal()
        for size in range(min(self.ngram_max, len(ctx)), self.ngram_min - 1, -1):
            key = tuple(self._tokens[-size:])
            starts = self._index.get(key)
            if starts:
                proposal = self._draft(
                    key, starts[-CANDIDATES:], min(n, self.max_tokens, self._limits.get(key, n))
                )
                break
        # More new tokens than one round commits: rounds went by without a draft (or the
        # prompt was not prefilled), and indexing them is catching up, timed apart as the
        # draft model's is, not the cost of this draft.
        if new > self.max_tokens + 1:
            proposal.catch_up_seconds = indexed
        return proposal if constraint is None else allowed_prefix(proposal, constraint)

    def propose_tree(self, ctx: Sequence[int], n: int, leaves: int) -> Proposal:
        """The continuations of the longest key's recent occurrences as a tree of up to
        `leaves` branches, grown best first (trees.grow): where the occurrences disagree on
        what comes next, a chain proposes nothing and a tree proposes each side."""
        start = time.perf_counter()
        new = self._update(ctx)
        indexed = time.perf_counter() - start
        tree = DraftTree.chain([])
        for size in range(min(self.ngram_max, len(ctx)), self.ngram_min - 1, -1):
            starts = self._index.get(tuple(self._tokens[-size:]))
            if starts:
                occurrences: Occurrences = [
                    (self._tokens, s) for s in reversed(starts[-CANDIDATES:])
                ]
                budget = min(n, self.max_tokens)
                tree = grow(occurrences, budget, TREE_MIN_PROBABILITY, leaves=leaves, overlap=True)
                break
        proposal = as_proposal(tree)
        if new > self.max_tokens + 1:  # catching up, as `propose` times it
            proposal.catch_up_seconds = indexed
        return proposal

    def _draft(self, key: tuple[int, ...], starts: list[int], n: int) -> Proposal:
        tokens = self._tokens
        votes = Counter(tokens[s] for s in starts)
        (first, count), *rest = votes.most_common()
        if count < 2 * sum(c for _, c in rest):  # the occurrences disagree on what comes next
            return Proposal()
        best = max(
            (s for s in starts if tokens[s] == first), key=lambda s: (self._match_length(s), s)
        )
        # A copy that reaches the end of the text goes on from its own start (an overlapping
        # copy): text that repeats with a short period is drafted to full length.
        period = len(tokens) - best
        draft = (tokens[best : best + n] * (n // period + 1))[:n]
        self._last = (key, draft)
        return Proposal(draft, [None] * len(draft))  # point masses

    def _match_length(self, start: int) -> int:
        """How many tokens before `start` equal the last ones of the sequence (at most
        MATCH_CAP)."""
        tokens = self._tokens
        length = 0
        while length < min(start, MATCH_CAP) and tokens[start - 1 - length] == tokens[-1 - length]:
            length += 1
        return length
