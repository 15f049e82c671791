"""Numbers that people type (options, ports, token ids): ASCII digits only.

Python's `int()` and `float()` read the digits of every script (`int("٣") == 3`), and
`str.isdigit()` also says yes to superscripts that `int()` refuses; a number typed by
mistake in another script must be an error, not a port or a token. Typer's own numeric
options already refuse them (pydantic reads them); the numbers specrun reads out of a
text of its own are read here.
"""

from __future__ import annotations

import re

WHOLE = "[0-9]+"  # a pattern, for the formats that hold a number (TOKEN+BIAS)
DECIMAL = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"


def whole_number(text: str) -> int | None:
    """`text` as a whole number if it is ASCII digits and nothing else; else None."""
    return int(text) if re.fullmatch(WHOLE, text) else None
