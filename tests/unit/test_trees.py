"""Token trees without a model: their shape, how they are grown from occurrences, and the walk
that verifies them against given rows."""

from __future__ import annotations

import numpy as np
import pytest

from specrun.core.drafting import as_proposal
from specrun.core.sampling import PositionNoise, SamplingParams, pick
from specrun.core.trees import ROOT, DraftTree, grow, verify_tree

GREEDY = SamplingParams(temperature=0.0)
VOCAB = 16


def rows_leading(*best: int) -> np.ndarray:
    """One row per entry, its logits led by that token."""
    rows = np.zeros((len(best), VOCAB), np.float32)
    rows[np.arange(len(best)), best] = 5.0
    return rows


# root -> 1 -> 2 -> 3, root -> 1 -> 4, root -> 5
TREE = DraftTree((1, 2, 3, 4, 5), (ROOT, 0, 1, 0, ROOT))


def test_a_tree_knows_its_shape():
    assert TREE.children(ROOT) == [0, 4] and TREE.children(0) == [1, 3]
    assert TREE.depths() == [1, 2, 3, 2, 1]
    assert TREE.path(2) == [0, 1, 2] and TREE.path(ROOT) == []
    assert TREE.leaves() == [2, 3, 4]
    assert not TREE.is_chain and DraftTree.chain([7, 8, 9]).is_chain
    with pytest.raises(ValueError, match="does not come before"):
        DraftTree((1, 2), (1, ROOT))


@pytest.mark.parametrize(
    ("best", "path", "next_token"),
    [
        ((5, 9, 9, 9, 9, 9), [4], 9),  # the second branch at once, then off the tree
        ((1, 4, 9, 9, 2, 9), [0, 3], 2),  # down the first branch, then its second child
        ((1, 2, 3, 7, 9, 9), [0, 1, 2], 7),  # the whole deepest branch, and the bonus
        ((8, 1, 1, 1, 1, 1), [], 8),  # nothing accepted
    ],
)
def test_greedy_verification_follows_the_targets_own_choice(best, path, next_token):
    """Row 0 is the root's, row 1 + i node i's: each node's best token picks the child."""
    found, token, ties = verify_tree(rows_leading(*best), TREE, GREEDY, np.random.default_rng(0), 0)
    assert (found, token) == (path, next_token)
    assert ties == [False] * (len(path) + 1)


def test_a_seeded_walk_draws_what_plain_decoding_draws_at_each_position():
    """With PositionNoise, the token at each depth is the one drawn at that sequence index
    from that node's row, whatever else the tree holds."""
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    rng = np.random.default_rng(3)
    for seed in range(20):
        noise = PositionNoise(seed)
        rows = rng.standard_normal((len(TREE) + 1, VOCAB)).astype(np.float32)
        path, token, _ = verify_tree(rows, TREE, params, noise, 40)
        node, expected = ROOT, []
        for depth in range(len(path) + 1):
            drawn, _ = pick(rows[node + 1], params, noise, None, 40 + depth)
            expected.append(drawn)
            child = next((c for c in TREE.children(node) if TREE.tokens[c] == drawn), None)
            node = child if child is not None else node
        assert [TREE.tokens[n] for n in path] + [token] == expected


def test_grow_takes_the_likeliest_nodes_first():
    """Four occurrences: three go on with 1, 2, then each its own way, one with 3, 4. With
    room for three nodes and two branches, the tree is 1 -> 2 and 3 (0.75, 0.75, 0.25: the
    earlier of equals), where a chain would go on with one of the three ways (0.25)."""
    text = [9, 1, 2, 5, 9, 1, 2, 6, 9, 1, 2, 7, 9, 3, 4]
    occurrences = [(text, end) for end in (1, 5, 9, 13)]
    tree = grow(occurrences, 3, 0.1, leaves=2)
    assert tree.tokens == (1, 2, 3) and tree.parents == (ROOT, 0, ROOT)
    chain = grow(occurrences, 3, 0.1, leaves=1)
    assert chain.is_chain and chain.tokens == (1, 2, 5)
    assert grow(occurrences, 3, 0.5, leaves=2).tokens == (1, 2)  # the rest is too unlikely
    assert len(grow(occurrences, 8, 0.1, leaves=2, depth_limit=2)) == 4  # 1, 2, 3, 4


def test_grow_with_overlap_goes_on_with_its_own_path():
    """The text's own occurrence that reaches the end continues with the drafted tokens."""
    text = [5, 6, 7, 5, 6]
    tree = grow([(text, 2)], 5, 0.1, overlap=True)
    assert tree.tokens == (7, 5, 6, 7, 5)


def test_a_grown_chain_is_proposed_as_a_chain():
    assert as_proposal(DraftTree.chain([1, 2])).tokens == [1, 2]
    branching = as_proposal(TREE)
    assert branching.tree is TREE and branching.size == 5 and branching.tokens == []
