"""Block drafts (DFlash, DSpark) on tiny generated models: greedy identity with plain decoding
at several block lengths and across turns, the sampled distribution against the target's own
marginals, a block rejected at every position, constraints and penalties, and the draft's
state after rejections.

Random weights make acceptance meaningless, but every path runs: the target's layer inputs
written into the draft's cache, the non-causal block pass, the Markov head, rollback."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from specrun.core.blocks import BlockDraft
from specrun.core.constraint import Constraint
from specrun.core.drafting import Proposal, policy_for
from specrun.core.gamma import GAMMA_MAX, FixedGamma
from specrun.core.loop import Round, generate
from specrun.core.sampling import Draws, SamplingParams, probabilities
from specrun.engine import Engine
from specrun.llama.blocks import open_block
from specrun.llama.grammar import Grammar
from specrun.llama.model import Model
from specrun.options import PROMPT_LOOKUP, BlockDraftFile, DraftOptions, Eagle3Head
from tests.support.distribution import assert_distributed, first_marginals
from tests.support.identity import GREEDY, committed, greedy_tokens
from tests.support.tinymodels import write_tiny_block_draft, write_tiny_eagle3_head

PROMPTS = ["the cat and the dog in the big red road", "hello world, code and edit a line", "I"]
FOLLOW_UP = " and the sun is small"


@pytest.fixture(scope="module")
def drafts(tiny_dir: Path) -> dict[str, Path]:
    """DFlash drafts at blocks of 2, 4 and 16, DSpark drafts anchor-first and not; those of
    blocks 4 and 16 and the anchor-first DSpark guess what the target says (`guessing`), so
    their rounds accept drafts, the others' mostly reject them."""
    written = {
        f"dflash-b{size}": write_tiny_block_draft(
            tiny_dir / f"df{size}.gguf", block_size=size, guessing=size > 2
        )
        for size in (2, 4, 16)
    }
    written["dspark"] = write_tiny_block_draft(tiny_dir / "dspark.gguf", dspark=True, guessing=True)
    written["dspark-bonus-anchor"] = write_tiny_block_draft(
        tiny_dir / "dspark-bonus-anchor.gguf", dspark=True, anchor_first=False
    )
    return written


def block_source(target: Model, path: Path) -> BlockDraft:
    block, rows = open_block(path, target)
    return BlockDraft(block, rows, target.n_vocab)


def two_turns(
    target: Model, source: BlockDraft | None, prompt: str, gamma: str
) -> tuple[list[int], list[Round]]:
    """A first answer, then a second turn that continues the first's text: the draft's cache
    and the target's carry over from one to the next."""
    first = target.tokenize(prompt)
    # auto as the engine builds it: priced per pass and by position for a block draft
    policy = policy_for(source, gamma, gamma_max=16)
    answer, rounds = greedy_tokens(target, first, source, policy, max_tokens=32)
    second = first + answer + target.tokenize(FOLLOW_UP, add_special=False)
    more, more_rounds = greedy_tokens(target, second, source, policy, max_tokens=32)
    return answer + more, rounds + more_rounds


@pytest.mark.parametrize(
    ("draft", "gamma"),
    [
        ("dflash-b2", "1"),
        ("dflash-b4", "3"),
        ("dflash-b16", "15"),
        ("dflash-b16", "6"),
        ("dflash-b16", "auto"),
        ("dspark", "8"),
        ("dspark-bonus-anchor", "7"),
        ("dspark", "auto"),
    ],
)
def test_greedy_with_a_block_draft_equals_plain_decoding(tiny_target, drafts, draft, gamma):
    with Model(tiny_target, n_ctx=512) as plain, Model(tiny_target, n_ctx=512) as target:
        source = block_source(target, drafts[draft])
        for prompt in PROMPTS:
            expected, _ = two_turns(plain, None, prompt, "0")
            tokens, rounds = two_turns(target, source, prompt, gamma)
            assert tokens == expected, prompt
            if gamma != "auto":
                assert max(r.drafted for r in rounds) == min(int(gamma), source.longest)
        source.block.close()


def test_the_block_drafts_no_more_than_it_was_trained_for(tiny_target, drafts):
    """A DFlash block of B drafts B - 1 tokens (its first row is the anchor's); anchor-first
    DSpark drafts B; a longer γ is cut to that."""
    with Model(tiny_target, n_ctx=512) as target:
        for draft, longest in (("dflash-b4", 3), ("dspark", 8), ("dspark-bonus-anchor", 7)):
            source = block_source(target, drafts[draft])
            prompt = target.tokenize(PROMPTS[0])
            _, rounds = greedy_tokens(target, prompt, source, FixedGamma(12), max_tokens=12)
            assert source.longest == longest
            assert max(r.drafted for r in rounds) == longest
            source.block.close()


DRAWS = 1200
SAMPLED = SamplingParams(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_sampled_block_drafts_follow_the_targets_distribution(tiny_target, tiny_dir, kind):
    """The first three tokens of many answers (the second and third through a round whose
    block drafted) against the marginals of the target's own distribution, by a χ² test per
    position. The draft guesses what the target says after the anchor, right about half the
    time, so both the accept and the resample branches run."""
    path = write_tiny_block_draft(
        tiny_dir / f"sampled-{kind}.gguf", dspark=kind == "dspark", guessing=True
    )
    with Model(tiny_target, n_ctx=256, threads=1) as target:
        source = block_source(target, path)
        prompt = target.tokenize(PROMPTS[0])
        counts = np.zeros((3, target.n_vocab))
        drafted = accepted = 0
        for draw in range(DRAWS):
            events = list(
                generate(
                    target,
                    prompt,
                    draft=source,
                    params=SAMPLED,
                    policy=FixedGamma(3),
                    max_tokens=3,
                    rng=np.random.default_rng(draw),
                )
            )
            for position, token in enumerate(committed(events)):
                counts[position, token] += 1
            drafted += sum(e.drafted for e in events if isinstance(e, Round))
            accepted += sum(e.accepted for e in events if isinstance(e, Round))
        assert 0 < accepted < drafted  # drafts were accepted and rejected
        source.block.close()
    with Model(tiny_target, n_ctx=256) as alone:

        def after(history: list[int]) -> np.ndarray:
            return probabilities(alone.logits(history, 1)[0], SAMPLED)

        for position, expected in enumerate(first_marginals(after, prompt, 3)):
            assert_distributed(counts[position], expected)


class Accepting:
    """A block draft's rounds, each accepting exactly `accept` drafts under greedy decoding:
    the block runs as it would (its cache takes in what the target decoded), but its
    proposal is replaced by the target's own next `accept` tokens and then one the target
    would not choose there, so the round's rejection falls at that position of the block."""

    def __init__(self, source: BlockDraft, answer: Sequence[int], prompt_length: int, accept: int):
        self.source, self.answer, self.accept = source, answer, accept
        self.prompt_length = prompt_length
        self.name, self.kind = source.name, source.kind

    def prefill(self, ctx: Sequence[int]) -> None:
        self.source.prefill(ctx)

    def propose(
        self,
        ctx: Sequence[int],
        n: int,
        params: SamplingParams,
        rng: Draws,
        constraint: Constraint | None = None,
    ) -> Proposal:
        drafted = self.source.propose(ctx, n, params, rng, constraint)
        done = len(ctx) - self.prompt_length
        right = list(self.answer[done : done + min(self.accept, len(drafted.tokens))])
        wrong = [] if len(right) == len(drafted.tokens) else [self.answer[done + len(right)] + 1]
        tokens = right + wrong
        return Proposal(tokens, [None] * len(tokens), drafted.catch_up_seconds)


@pytest.mark.parametrize("accept", range(8))
def test_a_block_rejected_at_any_position_leaves_the_draft_as_a_fresh_one(
    tiny_target, drafts, accept
):
    """Rollback at every position of a block of 7: rounds that accept exactly `accept` of
    their drafts (all 7 at the last), then the state the draft carries is the state of a
    fresh draft that took in the committed text at once: the next block's proposals are
    equal, and the answer is plain decoding's."""
    with Model(tiny_target, n_ctx=512) as target:
        prompt = target.tokenize(PROMPTS[0])
        answer, _ = greedy_tokens(target, prompt, max_tokens=60)
        target.reset()
        source = block_source(target, drafts["dspark-bonus-anchor"])
        forced = Accepting(source, answer, len(prompt), accept)
        tokens, rounds = greedy_tokens(target, prompt, forced, FixedGamma(7), max_tokens=40)
        assert tokens == answer[:40]
        assert all(r.accepted == min(accept, r.drafted) for r in rounds)
        assert sum(r.drafted > accept for r in rounds) >= 3 or accept == 7  # rejected there
        text = prompt + tokens
        carried = source.propose(text, 7, GREEDY, np.random.default_rng(0)).tokens
        source.block.close()
        target.reset()
        target.logits(text[:-1], 0)  # the committed text in one pass, as a new generation's
        fresh_source = block_source(target, drafts["dspark-bonus-anchor"])
        target.logits(text[:-1], 0)
        fresh = fresh_source.propose(text, 7, GREEDY, np.random.default_rng(0)).tokens
        fresh_source.block.close()
    assert carried == fresh and len(fresh) == 7


def test_a_block_draft_keeps_a_grammar_and_penalties(tiny_target, drafts):
    """Under a grammar, every drafted and committed token is one it allows, and with a repeat
    penalty greedy output is still plain decoding's with the same penalty."""
    grammar = 'root ::= (" the" | " cat" | " dog" | " and")+'
    penalized = replace(GREEDY, repeat_penalty=1.3, penalty_last_n=16)
    with Model(tiny_target, n_ctx=512) as plain, Model(tiny_target, n_ctx=512) as target:
        source = block_source(target, drafts["dflash-b16"])
        prompt = target.tokenize(PROMPTS[1])
        for params, constrained in ((GREEDY, True), (penalized, False)):
            expected = answer(plain, None, prompt, params, grammar if constrained else None)
            tokens = answer(target, source, prompt, params, grammar if constrained else None)
            assert tokens == expected
            if constrained:
                text = b"".join(map(target.piece, tokens)).decode()
                assert set(text.split()) <= {"the", "cat", "dog", "and"}, text
        source.block.close()


def answer(
    model: Model,
    draft: BlockDraft | None,
    prompt: list[int],
    params: SamplingParams,
    grammar: str | None,
) -> list[int]:
    events = generate(
        model,
        prompt,
        draft=draft,
        params=params,
        policy=FixedGamma(5 if draft else 0),
        max_tokens=24,
        constraint=Grammar(model, grammar) if grammar else None,
    )
    return committed(events)


def test_a_block_draft_beside_a_head_drafts_from_rows_of_its_own(tiny_target, tiny_dir, drafts):
    """A head and a block draft in one engine read different layers: the target keeps each its
    own rows, so whichever the hybrid asks first drafts (the other's rows were opened after
    or before it), and greedy output is plain decoding's over two turns."""
    head = Eagle3Head(write_tiny_eagle3_head(tiny_dir / "beside-head.gguf"))
    block = BlockDraftFile(drafts["dspark"])
    with Model(tiny_target, n_ctx=512) as plain:
        expected = {prompt: two_turns(plain, None, prompt, "0")[0] for prompt in PROMPTS}
    for order in ([head, block], [block, head]):
        drafting = DraftOptions(gamma="4")
        with Engine.load(tiny_target, order, params=GREEDY, drafting=drafting) as engine:
            for prompt in PROMPTS:
                first = engine.target.tokenize(prompt)
                rounds = [e for e in engine.stream(first, max_tokens=32) if isinstance(e, Round)]
                assert [t for r in rounds for t in r.tokens] == expected[prompt][:32]
                assert sum(r.drafted for r in rounds) > 0, order  # the first drafted


def test_gamma_reaches_the_whole_block_unless_bounded(tiny_target, drafts):
    """By default γ may reach a block draft's whole block where it is longer than GAMMA_MAX
    (auto prices each position of it); `gamma_max` given bounds it, and without a block
    draft the default is GAMMA_MAX."""
    block = BlockDraftFile(drafts["dflash-b16"])
    with Engine.load(tiny_target, block, drafting=DraftOptions()) as engine:
        assert engine.gamma_max == 15
    with Engine.load(tiny_target, [PROMPT_LOOKUP, block], drafting=DraftOptions()) as engine:
        assert engine.gamma_max == 15
    with Engine.load(tiny_target, block, drafting=DraftOptions(gamma_max=4)) as engine:
        assert engine.gamma_max == 4
    with Engine.load(tiny_target, BlockDraftFile(drafts["dflash-b4"])) as engine:
        assert engine.gamma_max == GAMMA_MAX
