"""Constraints on what the text may become (a grammar), as the round loop needs them.

A constraint is a state that follows the tokens taken and says which of some tokens may come
next. The loop keeps one for the committed text; drafting and verification work on forks
of it, so a rejected draft is a fork dropped. Under a constraint every distribution, the
draft's q and the target's p alike, is the sampling chain applied to the tokens it allows
(`sampling.allowed_best`): the output is distributed as the constrained target's.
`specrun.llama.grammar.Grammar` is llama.cpp's GBNF grammar behind this protocol.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from specrun.errors import SpecrunError


class ConstraintError(SpecrunError):
    """A constraint that cannot constrain this answer (a grammar that does not parse, or that
    allows no token of the vocabulary where the answer has got to): the request's fault."""


class Constraint(Protocol):
    def allows(self, tokens: np.ndarray) -> np.ndarray:
        """For each of `tokens` (ids), whether it may come next: a bool array."""
        ...

    def accept(self, token: int) -> None:
        """Take `token` (one it allows) as the next of the text."""
        ...

    def fork(self) -> Constraint:
        """An independent copy of this state."""
        ...
