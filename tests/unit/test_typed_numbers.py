"""Numbers and lists typed on the command line: ASCII digits, no empty items."""

from __future__ import annotations

import pytest

from specrun.cli.options import comma_list
from specrun.errors import OptionError
from specrun.system.numerals import whole_number


@pytest.mark.parametrize("text, number", [("0", 0), ("8080", 8080), ("007", 7)])
def test_ascii_digits_are_a_number(text, number):
    assert whole_number(text) == number


# Arabic-Indic, full-width, superscript, Devanagari; signs, spaces, nothing.
@pytest.mark.parametrize("text", ["٣", "８０", "²", "३", "-1", "+1", " 3", "3 ", "", "1_000"])
def test_anything_else_is_not(text):
    assert whole_number(text) is None  # int() reads the first four as numbers


def test_a_list_keeps_its_items_stripped():
    assert comma_list(" a, b ,c", "--x") == ["a", "b", "c"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "--x is empty"),
        (" ", "--x is empty"),
        (",", "--x has an empty item: ','"),
        ("a,,b", "--x has an empty item: 'a,,b'"),
        ("a, ", "--x has an empty item: 'a, '"),
    ],
)
def test_an_empty_item_is_refused(text, message):
    with pytest.raises(OptionError, match=f"^{message}$"):
        comma_list(text, "--x")
