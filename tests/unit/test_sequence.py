"""The loop's token sequences: a view of a growing sequence with a draft on the end reads
as the list it stands for, every slice included, and prefixes compare as lists do."""

from __future__ import annotations

import itertools

from specrun.core.sequence import Tokens, common_prefix_length


def test_a_continuation_slices_as_its_list():
    tokens = Tokens(range(10, 16))
    for n_tail in (0, 1, 3):
        view = tokens.then(list(range(90, 90 + n_tail)))
        whole = [*range(10, 16), *range(90, 90 + n_tail)]
        assert list(view) == whole and len(view) == len(whole)
        bounds = [None, -9, -3, -1, 0, 2, 5, 6, 7, 9, 20]
        for start, stop, step in itertools.product(bounds, bounds, (None, 1, 2, -1)):
            assert view[start:stop:step] == whole[start:stop:step], (start, stop, step)
    assert list(tokens.but_last()) == list(range(10, 15))


def test_common_prefix_length():
    assert common_prefix_length([], [1]) == 0
    assert common_prefix_length([1, 2, 3], [1, 2]) == 2
    assert common_prefix_length([1, 2, 3], [1, 5, 3]) == 1
    assert common_prefix_length(Tokens([4, 5]).then([6]), [4, 5, 6, 7]) == 3
