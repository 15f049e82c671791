"""Token trees: several guesses checked in one verify pass.

A tree's nodes are draft tokens, each after its parent (the root is the last committed
token, whose logits nobody has computed yet). The target decodes the committed token and
every node in one batch, each node attending to the text and its own ancestors only, and
returns a row for the root and each node. Verification walks down from the root: at each
node it draws the target's token from that node's row exactly as plain decoding would (the
greedy choice, a seeded generation's draw at that position, or a fresh draw) and follows
the child holding that token; where no child does, the drawn token is the round's next
token. Every committed token is thus the target's own draw given the text before it, so the
output is plain decoding's: token for token under greedy and a seed, in distribution
otherwise, whatever the tree holds, as long as the tree is fixed by the text before the
round (prompt lookup's and suffix drafts' are: they are point masses).

Trees are built best first (`grow`): each node's estimated probability is the product of
its steps' shares of the occurrences that vote for them, the expected number of accepted
tokens is the sum of the nodes' probabilities, and the node that adds the most is taken
next, up to γ nodes. A chain of γ tokens is the tree that never branches: at the same verify
width a tree accepts at least as much where the estimates hold.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specrun.core.sampling import Draws, Rows, SamplingParams, greedy_choice, pick

NEAR_TIE = 0.05  # as sampling.verify_greedy's: a committed token whose top two nearly tie
ROOT = -1  # a node's parent where it follows the committed text directly


@dataclass(frozen=True)
class DraftTree:
    """Draft tokens as a tree: node i holds `tokens[i]` after node `parents[i]` (ROOT: after
    the committed text); every parent comes before its children."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.parents):
            raise ValueError("a tree needs a parent for each token")
        for i, parent in enumerate(self.parents):
            if not ROOT <= parent < i:
                raise ValueError(f"node {i}'s parent {parent} does not come before it")

    @classmethod
    def chain(cls, tokens: Sequence[int]) -> DraftTree:
        return cls(tuple(tokens), tuple(range(-1, len(tokens) - 1)))

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def is_chain(self) -> bool:
        return all(parent == i - 1 for i, parent in enumerate(self.parents))

    def children(self, node: int) -> list[int]:
        """The nodes after `node` (ROOT: the first tokens), in order."""
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def depths(self) -> list[int]:
        """Each node's depth: 1 for the root's children."""
        depths: list[int] = []
        for parent in self.parents:
            depths.append(1 if parent == ROOT else depths[parent] + 1)
        return depths

    def path(self, node: int) -> list[int]:
        """The nodes from the root's child down to `node`."""
        path = []
        while node != ROOT:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def leaves(self) -> list[int]:
        """The nodes without children: each ends a branch."""
        has_child = set(self.parents)
        return [i for i in range(len(self.tokens)) if i not in has_child]


class TreeModel(Protocol):
    """A model that verifies a tree in one pass (specrun.llama.model.Model with branches)."""

    tree_branches: int  # the most leaves a tree it verifies may have

    def tree_logits(self, seq: Sequence[int], tree: DraftTree) -> np.ndarray:
        """Make the cache hold `seq`; whole rows for its last position and each node of `tree`."""
        ...

    def keep_path(self, path: Sequence[int]) -> None:
        """After `tree_logits`: the cache holds `seq` and the nodes of `path` after it."""
        ...


def verify_tree(
    rows: Rows,
    tree: DraftTree,
    params: SamplingParams,
    rng: Draws,
    position: int,
    penalize: Callable[[int, np.ndarray], np.ndarray] | None = None,
) -> tuple[list[int], int, list[bool]]:
    """The accepted path (its nodes) and the token after it. Row 0 is the root's (at sequence
    index `position`), row 1 + i node i's. At each node visited, the target's token is
    `pick`'s from its row, as plain decoding picks at that position (greedy, seeded or a fresh
    draw), and the walk follows the child holding it. `penalize(node, row)`: the row with the
    bias and penalties for the text up to that node (ROOT: the committed text). Also returns,
    greedy, whether each committed token's row was a near tie."""
    if len(rows) != len(tree) + 1:
        raise ValueError("need one target row for the root and each node")
    path: list[int] = []
    ties: list[bool] = []
    node = ROOT
    while True:
        row = rows[node + 1]
        if penalize is not None and isinstance(row, np.ndarray):
            row = penalize(node, row)
        if params.greedy:  # pick's choice, and the gap to the second best, in one scan
            token, gap = greedy_choice(row)
            ties.append(gap < NEAR_TIE)
        else:
            token, _ = pick(row, params, rng, None, position + len(path))
        following = next((c for c in tree.children(node) if tree.tokens[c] == token), None)
        if following is None:
            return path, token, ties
        path.append(following)
        node = following


# An occurrence of the matched text: a sequence, and where the match's continuation starts.
Occurrences = list[tuple[Sequence[int], int]]


def grow(
    occurrences: Occurrences,
    budget: int,
    min_probability: float,
    *,
    leaves: int = 1,
    overlap: bool = False,
    depth_limit: int | None = None,
) -> DraftTree:
    """The tree of `budget` nodes at most that the occurrences' continuations estimate most
    accepted tokens for, best first: a node's estimated probability is its parent's times its
    token's share of the occurrences still following the parent (an occurrence whose sequence
    ends stays in the share's denominator), and nodes below `min_probability` are left out.
    With `overlap` (the text's own occurrences), a sequence reaching its end goes on with the
    tokens of the node's path, as the text will. At most `leaves` branches (1: a chain);
    `depth_limit`: the deepest a node may lie."""
    tokens: list[int] = []
    parents: list[int] = []
    has_children: set[int] = set()
    paths: list[list[int]] = []  # each node's tokens from the root
    # Frontier: (-probability, order, parent, token, occurrences that follow it), best first.
    frontier: list[tuple[float, int, int, int, Occurrences]] = []
    order = 0

    def offer(parent: int, probability: float, alive: Occurrences, drafted: list[int]) -> None:
        nonlocal order
        if depth_limit is not None and len(drafted) >= depth_limit:
            return
        step = len(drafted)
        following: dict[int, Occurrences] = {}
        for sequence, end in alive:
            at = end + step
            if at < len(sequence):
                token = sequence[at]
            elif overlap and at - len(sequence) < step:
                token = drafted[at - len(sequence)]
            else:
                continue
            following.setdefault(token, []).append((sequence, end))
        votes = Counter({token: len(found) for token, found in following.items()})
        for token, count in votes.most_common():
            share = probability * count / len(alive)
            if share >= min_probability:
                heapq.heappush(frontier, (-share, order, parent, token, following[token]))
                order += 1

    offer(ROOT, 1.0, occurrences, [])
    branches = 0
    while frontier and len(tokens) < budget:
        negative, _, parent, token, alive = heapq.heappop(frontier)
        if parent in has_children or branches == 0:  # a new branch
            if branches == leaves:
                continue
            branches += 1
        has_children.add(parent)
        drafted = [*(paths[parent] if parent != ROOT else []), token]
        tokens.append(token)
        parents.append(parent)
        paths.append(drafted)
        offer(len(tokens) - 1, -negative, alive, drafted)
    return DraftTree(tuple(tokens), tuple(parents))
