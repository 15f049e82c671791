"""Greedy identity: speculative output must equal the target's own, token for token,
except at a near tie that batch numerics can flip (specrun.core.exactness, DESIGN.md)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from specrun.core.drafting import DraftSource
from specrun.core.exactness import first_divergence
from specrun.core.gamma import GammaPolicy
from specrun.core.loop import Event, Round, generate
from specrun.core.sampling import SamplingParams
from specrun.llama.model import Model

GREEDY = SamplingParams(temperature=0)


def committed(events: Iterable[Event]) -> list[int]:
    """The tokens a generation's events committed, in order."""
    return [t for e in events if isinstance(e, Round) for t in e.tokens]


def greedy_tokens(
    target: Model,
    prompt: Sequence[int],
    draft: DraftSource | None = None,
    policy: GammaPolicy | None = None,
    max_tokens: int = 48,
    params: SamplingParams = GREEDY,
) -> tuple[list[int], list[Round]]:
    """The tokens a greedy generation commits (`params`: greedy with penalties, say)."""
    rounds = [
        e
        for e in generate(
            target, prompt, draft=draft, params=params, policy=policy, max_tokens=max_tokens
        )
        if isinstance(e, Round)
    ]
    return [t for r in rounds for t in r.tokens], rounds


def assert_greedy_identical(
    target: Model, prompt: Sequence[int], plain: list[int], speculative: list[int], epsilon: float
) -> str:
    """Return 'identical' or a description of a legitimate near-tie divergence."""
    if plain == speculative:
        return "identical"
    divergence = first_divergence(target, prompt, plain, speculative)
    assert divergence is not None, "one output is a prefix of the other"
    assert divergence.is_near_tie(epsilon), f"diverged at {divergence.describe()}"
    return f"near tie at {divergence.describe()}"
