"""Suffix drafts (SuffixDecoding, arXiv 2411.04975): continuations of the text's tail found in
the request's own prompt and answer, and in earlier answers of this process.

Agents repeat themselves across requests (the same tool call with other arguments, the same
function rewritten), which prompt lookup, seeing one request, cannot use. A `SuffixStore`
keeps earlier generations' answers, shared by every slot's `SuffixDraft`; each proposal is
the most frequent continuation of the longest match of the text's tail, free to compute
and a point mass for verification, as prompt lookup's.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, deque
from collections.abc import Generator, Iterator, Sequence

from specrun.core.constraint import Constraint
from specrun.core.drafting import (
    DraftKind,
    DraftSource,
    HybridDraft,
    Proposal,
    allowed_prefix,
    as_proposal,
)
from specrun.core.loop import Event, Round
from specrun.core.sampling import Draws, SamplingParams
from specrun.core.sequence import extends, origin
from specrun.core.trees import DraftTree, grow
from specrun.errors import OptionError

# SuffixDecoding's defaults (Arctic Inference's `max_tree_depth`, `max_spec_factor`,
# `min_token_prob`): matches are considered up to 24 tokens back; a match of p tokens
# proposes at most p tokens; a continuation stops where its estimated probability, the
# product of each step's share of the occurrences still followed, falls below 0.1.
MAX_DEPTH = 24
SPEC_FACTOR = 1.0
MIN_PROBABILITY = 0.1
MAX_TOKENS = MAX_DEPTH  # the longest proposal, whatever the match (γ bounds it first)
# Keys of these lengths are indexed, longest first: a tail whose 2k-gram occurs nowhere has
# matches shorter than 2k, so extending the k-gram's occurrences backwards costs under k
# comparisons each. Single tokens are no key (as prompt lookup's default): they are mostly
# wrong, and a rejected draft still widens the verify.
KEY_LENGTHS = (16, 8, 4, 2)
CANDIDATES = 64  # occurrences of a key weighed per round (the most recent ones)
# The store's default bound: its answers and their index take 700 to 800 bytes a token
# (measured), so at most about 100 MiB.
STORE_BUDGET = 131_072

_SHIFT = 32  # an occurrence is one int: its sequence's number above, its position below
_POSITION = (1 << _SHIFT) - 1

# Occurrences of a match: each a sequence and the position its continuation starts at.
Occurrences = list[tuple[Sequence[int], int]]


class SuffixIndex:
    """Token sequences indexed by their n-grams (of `KEY_LENGTHS`), so that the longest
    suffix of a text found in them, and where it continues, costs a few dictionary lookups.
    Not thread-safe: `SuffixStore` guards the ones it shares."""

    def __init__(self) -> None:
        self.sequences: dict[int, list[int]] = {}
        self._occurrences: dict[int, list[int]] = {}  # hash of an n-gram -> packed occurrences

    def __len__(self) -> int:
        return len(self.sequences)

    def extend(self, number: int, tokens: Sequence[int]) -> None:
        """Append tokens to sequence `number` (a new one where there is none) and index the
        n-grams they give a continuation to."""
        sequence = self.sequences.setdefault(number, [])
        seen = len(sequence)
        sequence.extend(tokens)
        self.insert(number, sequence, list(keys_of(sequence, number, seen)))

    def insert(self, number: int, sequence: list[int], keys: list[tuple[int, int]]) -> None:
        """Index sequence `number` by `keys` (`keys_of` it, computed beforehand)."""
        self.sequences[number] = sequence
        for key, occurrence in keys:
            self._occurrences.setdefault(key, []).append(occurrence)

    def remove(self, number: int, keys: list[tuple[int, int]]) -> None:
        """Forget sequence `number` and its `keys` (`keys_of` it)."""
        del self.sequences[number]
        for key, occurrence in keys:
            occurrences = self._occurrences[key]
            occurrences.remove(occurrence)  # the oldest first: found at the front
            if not occurrences:
                del self._occurrences[key]

    def match(self, tail: Sequence[int]) -> tuple[int, Occurrences]:
        """The longest suffix of `tail` (up to MAX_DEPTH tokens) that occurs with a
        continuation, among a key's most recent CANDIDATES occurrences: its length (0 where
        none) and its occurrences, the most recent first."""
        n = len(tail)
        for k in KEY_LENGTHS:
            if n < k:
                continue
            packed = self._occurrences.get(hash(tuple(tail[n - k :])))
            if not packed:
                continue
            longest, found = 0, Occurrences()
            for occurrence in reversed(packed[-CANDIDATES:]):
                sequence = self.sequences[occurrence >> _SHIFT]
                end = occurrence & _POSITION
                length = _matched(sequence, end, tail)
                if length < k:  # another n-gram of the same hash
                    continue
                if length > longest:
                    longest, found = length, [(sequence, end)]
                elif length == longest:
                    found.append((sequence, end))
            if found:
                return longest, found
        return 0, []


def keys_of(sequence: Sequence[int], number: int, seen: int = 0) -> Iterator[tuple[int, int]]:
    """Each n-gram of `sequence` that ends at a position from `seen` on and has a token after
    it: the hash of the n-gram, and the occurrence packed (sequence number, that position)."""
    base = number << _SHIFT
    for end in range(max(seen, 1), len(sequence)):
        for k in KEY_LENGTHS:
            if end >= k:
                yield hash(tuple(sequence[end - k : end])), base | end


def _matched(sequence: Sequence[int], end: int, tail: Sequence[int]) -> int:
    """How many tokens before `end` equal the last ones of `tail` (at most MAX_DEPTH)."""
    n, length = len(tail), 0
    most = min(end, n, MAX_DEPTH)
    while length < most and sequence[end - 1 - length] == tail[n - 1 - length]:
        length += 1
    return length


def follow(occurrences: Occurrences, limit: int, overlap: bool = False) -> list[int]:
    """The most frequent continuation of a match, as SuffixDecoding's path scoring reads its
    tree: at each step the token most of the occurrences still followed go on with (the most
    recent at a tie), its estimated probability the product of each step's share, up to
    `limit` tokens and while that probability is at least MIN_PROBABILITY. An occurrence whose
    sequence ends stays in the share's denominator. With `overlap` (the request's own text), a
    sequence reaching its end goes on with the tokens drafted so far, as the text will."""
    draft: list[int] = []
    probability = 1.0
    alive = occurrences
    while len(draft) < limit and alive:
        step = len(draft)
        following = [
            sequence[end + step]
            if end + step < len(sequence)
            else draft[end + step - len(sequence)]
            if overlap
            else None
            for sequence, end in alive
        ]
        votes = Counter(token for token in following if token is not None)
        if not votes:
            break
        token, count = votes.most_common(1)[0]
        probability *= count / len(alive)
        if probability < MIN_PROBABILITY:
            break
        draft.append(token)
        alive = [occurrence for occurrence, t in zip(alive, following) if t == token]
    return draft


class SuffixStore:
    """Earlier generations' answers, indexed per tenant (answers are kept and drafted from
    only within the tenant that produced them; None is the process's default tenant), at most
    `budget` tokens in all, the oldest answers evicted first. Every slot's source shares one
    store: its methods may be called from several threads at once."""

    def __init__(self, budget: int = STORE_BUDGET) -> None:
        if budget < 1:
            raise OptionError(f"a suffix store's budget must be at least 1 token, got {budget}")
        self.budget = budget
        self._lock = threading.Lock()
        self._tenants: dict[str | None, SuffixIndex] = {}
        self._answers: deque[tuple[str | None, int]] = deque()  # tenant, number: oldest first
        self._numbers = itertools.count()  # each answer's, unique across threads
        self.tokens = 0  # held now

    def add(self, answer: Sequence[int], tenant: str | None = None) -> None:
        """Keep an answer (its last `budget` tokens) for the tenant's later drafts, evicting
        the oldest answers beyond the budget. One too short to hold a key is not kept. The
        keys are hashed outside the lock: the other slots' rounds match meanwhile."""
        tokens = list(answer[-self.budget :])
        if len(tokens) <= min(KEY_LENGTHS):
            return
        number = next(self._numbers)
        keys = list(keys_of(tokens, number))
        with self._lock:
            self._tenants.setdefault(tenant, SuffixIndex()).insert(number, tokens, keys)
            self._answers.append((tenant, number))
            self.tokens += len(tokens)
            evicted = []  # each with its tokens, read under the lock
            while self.tokens > self.budget:
                tenant_of, number_of = self._answers.popleft()
                sequence = self._tenants[tenant_of].sequences[number_of]
                evicted.append((tenant_of, number_of, sequence))
                self.tokens -= len(sequence)
        for tenant_of, number_of, sequence in evicted:
            self._evict(tenant_of, number_of, list(keys_of(sequence, number_of)))

    def _evict(self, tenant: str | None, number: int, keys: list[tuple[int, int]]) -> None:
        """Forget an answer already out of the queue and the count (matched until now)."""
        with self._lock:
            index = self._tenants[tenant]
            index.remove(number, keys)
            if not index:
                del self._tenants[tenant]

    def match(self, tail: Sequence[int], tenant: str | None = None) -> tuple[int, Occurrences]:
        """`SuffixIndex.match` over the tenant's answers. The answers it returns never change,
        so they are read after the lock is let go, evicted or not."""
        with self._lock:
            index = self._tenants.get(tenant)
            return index.match(tail) if index is not None else (0, [])

    def kept(self) -> list[tuple[str | None, list[int]]]:
        """Every answer held now with its tenant, the oldest first: what `add`, in this order,
        makes a store of again (`specrun.suffix_file` keeps it on disk)."""
        with self._lock:
            return [
                (tenant, list(self._tenants[tenant].sequences[number]))
                for tenant, number in self._answers
            ]

    def answers(self, tenant: str | None = None) -> list[list[int]]:
        """The tenant's answers held now, the oldest first."""
        with self._lock:
            index = self._tenants.get(tenant)
            return [list(answer) for answer in index.sequences.values()] if index else []


class SuffixDraft:
    """Suffix drafts for one generation at a time (a slot's): an index over the request's own
    prompt and answer so far, as prompt lookup keeps, and the shared `store` of earlier
    answers, the `tenant`'s only (`Engine.stream` sets it, and adds the answer to the store
    when the generation ends: `remembering`).

    Each round it proposes the most frequent continuation (`follow`) of the longest match of
    the text's tail, found in either, the request's own text first at equal length (and where
    the longer match continues with nothing likely enough, the other). It speculates more
    where the match is longer: at most min(n, SPEC_FACTOR x the match's length, MAX_TOKENS)
    tokens. Proposals are point masses, so the accept rule stays exact.
    """

    name = "suffix"
    kind: DraftKind = "suffix"

    def __init__(self, store: SuffixStore, leaves: int = 1) -> None:
        """`leaves` > 1: drafts as token trees of that many branches where the target verifies
        trees (`propose_tree`)."""
        self.store = store
        self.tenant: str | None = None
        self.leaves = leaves
        self._restart()

    def _restart(self) -> None:
        self._own = SuffixIndex()
        self._tokens: list[int] = self._own.sequences.setdefault(0, [])  # the text indexed
        self._source: Sequence[int] | None = None  # the caller's sequence it was copied from

    def prefill(self, ctx: Sequence[int]) -> None:
        self._update(ctx)

    def _update(self, ctx: Sequence[int]) -> int:
        """Index what ctx adds to the text (a new conversation or an edited one: all of it
        afresh); return how many tokens were new."""
        if not extends(ctx, self._tokens, self._source):
            self._restart()
        new = list(ctx[len(self._tokens) :])
        self._own.extend(0, new)
        # A prefix view of an append-only sequence (the prompt but its last token, as the
        # loop prefills) stands for that sequence: the rounds that pass it then check the seam.
        self._source = origin(ctx)
        return len(new)

    def propose(
        self,
        ctx: Sequence[int],
        n: int,
        params: SamplingParams,
        rng: Draws,
        constraint: Constraint | None = None,
    ) -> Proposal:
        start = time.perf_counter()
        new = self._update(ctx)
        indexed = time.perf_counter() - start
        tail = self._tokens[-MAX_DEPTH:]
        own, earlier = self._own.match(tail), self.store.match(tail, self.tenant)
        draft: list[int] = []
        for (length, found), overlap in sorted(
            [(own, True), (earlier, False)], key=lambda choice: choice[0][0], reverse=True
        ):  # a stable sort: the request's own text first at equal length
            if length and not draft:
                draft = follow(found, min(n, int(SPEC_FACTOR * length), MAX_TOKENS), overlap)
        proposal = Proposal(draft, [None] * len(draft))  # point masses
        # More new tokens than a round commits: rounds went by without a draft (or the prompt
        # was not prefilled); indexing them is catching up, timed apart as lookup's is.
        if new > MAX_TOKENS + 1:
            proposal.catch_up_seconds = indexed
        return proposal if constraint is None else allowed_prefix(proposal, constraint)

    def propose_tree(self, ctx: Sequence[int], n: int, leaves: int) -> Proposal:
        """The continuations of the longest match (the request's own text first at equal
        length) as a tree of up to `leaves` branches, grown best first by the occurrences'
        shares (trees.grow), no deeper than `propose`'s chain may reach."""
        start = time.perf_counter()
        new = self._update(ctx)
        indexed = time.perf_counter() - start
        tail = self._tokens[-MAX_DEPTH:]
        own, earlier = self._own.match(tail), self.store.match(tail, self.tenant)
        (length, found), overlap = max(
            [(own, True), (earlier, False)], key=lambda choice: choice[0][0]
        )  # the first of equals: the request's own text
        tree = DraftTree.chain([])
        if length:
            depth = min(int(SPEC_FACTOR * length), MAX_TOKENS)
            tree = grow(
                found, n, MIN_PROBABILITY, leaves=leaves, overlap=overlap, depth_limit=depth
            )
        proposal = as_proposal(tree)
        if new > MAX_TOKENS + 1:  # catching up, as `propose` times it
            proposal.catch_up_seconds = indexed
        return proposal


def suffix_part(source: DraftSource | None) -> SuffixDraft | None:
    """The suffix draft a source drafts with: itself, or the hybrid's first source."""
    if isinstance(source, HybridDraft):
        source = source.lookup
    return source if isinstance(source, SuffixDraft) else None


def remembering(
    events: Generator[Event, None, None], source: DraftSource | None, tenant: str | None
) -> Generator[Event, None, None]:
    """A generation's events; where `source` drafts from a suffix store, it drafts from the
    tenant's answers, and the answer (the tokens its rounds committed) joins them when the
    generation ends, however it ends. The loop only asks a source for drafts, so the one that
    runs the generation (the engine) says where an answer begins and ends."""
    suffix = suffix_part(source)
    if suffix is None:
        yield from events
        return
    suffix.tenant = tenant
    answer: list[int] = []
    try:
        for event in events:
            if isinstance(event, Round):
                answer.extend(event.tokens)
            yield event
    finally:
        events.close()
        suffix.store.add(answer, tenant)
