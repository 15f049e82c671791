"""EAGLE-3 heads and MTP layers on tiny generated models: greedy identity with plain decoding
at every γ and across turns, the sampled distribution by a two-sample χ² test, the head's
state after rejections, and the refusals of a head that does not fit its target.

Random weights make acceptance meaningless, but every path runs: the target's hidden rows,
the head's encoder and decoder, rollback, the hybrid with prompt lookup."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from specrun.core.gamma import FixedGamma
from specrun.core.heads import HeadDraft
from specrun.core.loop import Round, generate
from specrun.core.sampling import SamplingParams
from specrun.engine import Engine
from specrun.errors import SpecrunError
from specrun.llama.heads import open_eagle3, open_mtp
from specrun.llama.model import Model
from specrun.options import MTP_LAYERS, DraftOptions, Eagle3Head, LoadOptions
from tests.support.identity import GREEDY
from tests.support.tinymodels import (
    write_tiny_eagle3_head,
    write_tiny_model,
    write_tiny_mtp_model,
)

PROMPTS = ["the cat and the dog in the big red road", "hello world, code and edit a line", "I"]
FOLLOW_UP = " and the sun is small"


@pytest.fixture(scope="module")
def heads(tiny_dir: Path, tiny_target: Path) -> dict[str, tuple[Path, object]]:
    """Target and draft of each kind: a head with its own embeddings, one borrowing the
    target's, and a target's own MTP layers."""
    return {
        "eagle3": (
            tiny_target,
            Eagle3Head(write_tiny_eagle3_head(tiny_dir / "h.gguf")),
        ),
        "eagle3-borrowing": (
            tiny_target,
            Eagle3Head(write_tiny_eagle3_head(tiny_dir / "hb.gguf", own_embeddings=False)),
        ),
        "mtp": (write_tiny_mtp_model(tiny_dir / "mtp.gguf"), MTP_LAYERS),
    }


def two_turns(engine: Engine, prompt: str, max_tokens: int = 40) -> tuple[list[int], list[Round]]:
    """A first answer, then a second turn that continues the first's text: the head's state and
    the target's cache carry over from one to the next."""
    first = engine.prompt(prompt)
    rounds = [e for e in engine.stream(first, max_tokens=max_tokens) if isinstance(e, Round)]
    answer = [t for r in rounds for t in r.tokens]
    second = first + answer + engine.target.tokenize(FOLLOW_UP, add_special=False)
    more = [e for e in engine.stream(second, max_tokens=max_tokens) if isinstance(e, Round)]
    return answer + [t for r in more for t in r.tokens], rounds + more


@pytest.mark.parametrize("kind", ["eagle3", "eagle3-borrowing", "mtp"])
@pytest.mark.parametrize("gamma", ["1", "3", "8", "auto"])
def test_greedy_with_a_head_equals_plain_decoding(tiny_target, heads, kind, gamma):
    target, draft = heads[kind]
    options = DraftOptions(gamma=gamma)
    with (
        Engine.load(target, params=GREEDY) as plain,
        Engine.load(target, draft, params=GREEDY, drafting=options) as speculative,
    ):
        for prompt in PROMPTS:
            expected, _ = two_turns(plain, prompt)
            tokens, rounds = two_turns(speculative, prompt)
            assert tokens == expected, prompt
            if gamma != "auto":
                assert sum(r.drafted for r in rounds) > 0  # the head really drafted


@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
def test_the_hybrid_with_a_head_keeps_greedy_identity(heads, kind):
    target, draft = heads[kind]
    options = DraftOptions(gamma="4", hybrid=True)
    with (
        Engine.load(target, params=GREEDY) as plain,
        Engine.load(target, draft, params=GREEDY, drafting=options) as hybrid,
    ):
        assert hybrid.draft is not None and hybrid.draft.kind == "hybrid"
        prompt = "the cat the cat the cat the cat"
        assert two_turns(hybrid, prompt)[0] == two_turns(plain, prompt)[0]


SAMPLES = 600


def later_tokens(engine: Engine, prompt: list[int], seed: int) -> list[tuple[int, int]]:
    """The second and third tokens of many seeded answers: each came through a verify with a
    draft (the first comes from the prompt's pass)."""
    out = []
    for i in range(SAMPLES):
        params = SamplingParams(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=seed + i)
        tokens = [
            t
            for e in engine.stream(prompt, max_tokens=3, params=params)
            if isinstance(e, Round)
            for t in e.tokens
        ]
        out.append((tokens[1] if len(tokens) > 1 else -1, tokens[2] if len(tokens) > 2 else -1))
    return out


def two_sample_p_value(a: list[int], b: list[int]) -> float:
    """χ² of a 2 × k table; categories rarer than 10 in both samples pooled as one."""
    counts_a, counts_b = Counter(a), Counter(b)
    common = [t for t in counts_a | counts_b if counts_a[t] + counts_b[t] >= 10]
    table = [[counts[t] for t in common] for counts in (counts_a, counts_b)]
    for row, counts in zip(table, (counts_a, counts_b)):
        row.append(sum(counts.values()) - sum(row))
    table = [list(column) for column in zip(*table) if sum(column) > 0]
    return float(chi2_contingency(np.array(table).T).pvalue)


@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
def test_sampling_with_a_head_keeps_the_targets_distribution(heads, kind):
    target, draft = heads[kind]
    # One thread: 1200 short generations, where a second thread waiting on a busy machine
    # (other tests, benchmarks) costs more than the decode.
    one = LoadOptions(threads=1)
    with (
        Engine.load(target, options=one) as plain,
        Engine.load(target, draft, options=one, drafting=DraftOptions(gamma="3")) as speculative,
    ):
        prompt = plain.prompt(PROMPTS[0])
        expected = later_tokens(plain, prompt, seed=1000)
        sampled = later_tokens(speculative, prompt, seed=5000)
    for position in (0, 1):
        p = two_sample_p_value([s[position] for s in expected], [s[position] for s in sampled])
        assert p > 1e-3, f"token {position + 2} does not follow the target (p={p:.2e})"


def test_after_rejections_the_head_drafts_as_a_fresh_one_over_the_committed_text(heads):
    """Rollback: the state a head carries through rounds of rejections is the state of a head
    that took in the committed text at once (its proposals equal, to the last token)."""
    target_path, draft = heads["eagle3"]
    with Model(target_path, n_ctx=512) as target:
        head, rows = open_eagle3(draft.path, target)
        source = HeadDraft(head, rows, target.n_vocab)
        prompt = target.tokenize(PROMPTS[0])
        rounds = [
            e
            for e in generate(
                target, prompt, draft=source, params=GREEDY, policy=FixedGamma(4), max_tokens=30
            )
            if isinstance(e, Round)
        ]
        assert sum(r.drafted - r.accepted for r in rounds) > 0  # drafts were rejected
        text = prompt + [t for r in rounds for t in r.tokens]
        rng = np.random.default_rng(0)
        carried = source.propose(text, 6, GREEDY, rng).tokens
        head.close()
        target.reset()
        target.logits(text[:-1], 0)  # the committed text in one pass, as a new generation's
        head, rows = open_eagle3(draft.path, target)
        target.logits(text[:-1], 0)
        fresh = HeadDraft(head, rows, target.n_vocab).propose(text, 6, GREEDY, rng).tokens
        head.close()
    assert carried == fresh and len(fresh) == 6


@pytest.mark.parametrize(
    ("write", "why"),
    [
        (lambda d: write_tiny_eagle3_head(d / "wide.gguf", target_hidden=48), "hidden size 48"),
        (
            lambda d: write_tiny_eagle3_head(d / "deep.gguf", target_layers=(0, 5, 9)),
            r"reads target layers \[0, 5, 9\]; target.gguf has 2",
        ),
        (lambda d: write_tiny_eagle3_head(d / "words.gguf", variant="x"), "does not match"),
        (lambda d: write_tiny_model(d / "model.gguf"), "is not an EAGLE-3 head"),
    ],
    ids=["hidden-size", "layer-ids", "vocabulary", "not-a-head"],
)
def test_a_head_made_for_another_target_is_refused_before_generation(
    tiny_target, tiny_dir, write, why
):
    with pytest.raises(SpecrunError, match=why):
        Engine.load(tiny_target, Eagle3Head(write(tiny_dir)))


def test_mtp_needs_a_target_with_mtp_layers(tiny_target, tiny_dir):
    for target in (tiny_target, write_tiny_mtp_model(tiny_dir / "trunk.gguf", with_mtp=False)):
        with pytest.raises(SpecrunError, match="has no MTP layers"):
            Engine.load(target, MTP_LAYERS)
    with Model(tiny_target) as plain:
        with pytest.raises(SpecrunError, match="has no MTP layers"):
            open_mtp(plain)


@pytest.mark.parametrize("gamma", ["3", "auto"])
def test_a_draft_model_a_head_and_lookup_together_keep_greedy_identity(
    tiny_target, tiny_draft, heads, gamma
):
    """Several sources at hand: auto picks per round among lookup, the draft model and the
    head; a fixed γ asks lookup, then the first draft. The output is the target's own."""
    head = heads["eagle3"][1]
    options = DraftOptions(gamma=gamma, hybrid=True)
    with (
        Engine.load(tiny_target, params=GREEDY) as plain,
        Engine.load(tiny_target, [tiny_draft, head], params=GREEDY, drafting=options) as several,
    ):
        assert several.draft is not None and several.draft.name == "lookup+draft.gguf+eagle3:h.gguf"
        assert several.draft_model is not None and several.head is not None
        drafted = []
        for prompt in [*PROMPTS, "the cat the cat the cat the cat"]:
            tokens, rounds = two_turns(several, prompt)
            assert tokens == two_turns(plain, prompt)[0], prompt
            drafted.append(sum(r.drafted for r in rounds))
        # A fixed γ drafts in every answer; auto, once it has measured that drafting does not
        # pay on the tiny models, may decode a whole short answer plainly (timing decides).
        assert all(drafted) if gamma != "auto" else any(drafted), drafted
