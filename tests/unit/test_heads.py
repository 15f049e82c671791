"""Heads fed by the target's hidden states, without a model: the rows the target keeps, which
pairs a head takes in and at which positions, rollback after a rejection at every position
of a round, catching up, and the native names the llama-ext.h functions are bound by."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from specrun.core.heads import HeadDraft, HiddenRows
from specrun.core.sampling import SamplingParams
from specrun.core.sequence import Tokens
from specrun.llama import ext

GREEDY = SamplingParams(temperature=0)
VOCAB = 50


def row(position: int, token: int) -> np.ndarray:
    """What the fake target's pass leaves at a position: it names the position and token."""
    return np.array([[position, token]], np.float32)


@dataclass
class Feed:
    position: int
    tokens: list[int]
    states: np.ndarray
    own: bool


@dataclass
class FakeHead:
    """A head whose cache is a dict of position -> (token, state) and whose next token is a
    fixed function of the pair it decoded last, so what it drafts is known."""

    offset: int = 0
    kind: str = "eagle3"
    name: str = "eagle3:fake"
    cache: dict[int, tuple[int, tuple[float, ...]]] = field(default_factory=dict)
    feeds: list[Feed] = field(default_factory=list)

    def truncate(self, position: int) -> None:
        self.cache = {p: v for p, v in self.cache.items() if p < position}

    def feed(self, position, tokens, states, *, own, output):
        self.feeds.append(Feed(position, list(tokens), np.array(states), own))
        for i, token in enumerate(tokens):
            assert position + i not in self.cache, "a pair written over without a truncate"
            self.cache[position + i] = (token, tuple(states[i]))
        if not output:
            return None
        logits = np.zeros(VOCAB, np.float32)
        logits[(tokens[-1] * 7 + position + len(tokens)) % VOCAB] = 10.0
        return logits, np.array([position + len(tokens) - 1, -1.0], np.float32)


class FakeTarget:
    """Keeps rows as Model does: each pass writes those of the positions it decoded."""

    def __init__(self, rows: HiddenRows) -> None:
        self.rows = rows
        self.held: list[int] = []

    def decode(self, seq: Sequence[int]) -> None:
        keep = next((i for i, (a, b) in enumerate(zip(self.held, seq)) if a != b), None)
        keep = min(len(self.held), len(seq)) if keep is None else keep
        self.rows.truncate(keep)
        for position in range(keep, len(seq)):
            self.rows.write(position, row(position, seq[position]))
        self.held = list(seq)


def committed_pairs(head: FakeHead, ctx: Sequence[int]) -> dict[int, tuple[int, tuple[float, ...]]]:
    """What a head that took in ctx holds: pair P = (ctx[P + 1], the target's row at P)."""
    return {p + head.offset: (ctx[p + 1], tuple(row(p, ctx[p])[0])) for p in range(len(ctx) - 1)}


# --- the rows the target keeps -------------------------------------------------------------


def test_rows_follow_the_cache_and_are_released_once_taken():
    rows = HiddenRows(2, capacity=16)
    for position in range(6):
        rows.write(position, row(position, 100 + position))
    assert (rows.start, rows.end) == (0, 6)
    assert rows.rows(2, 4)[:, 0].tolist() == [2, 3]
    rows.truncate(4)  # the cache dropped a rejected suffix
    rows.write(4, row(4, 7))
    assert rows.rows(3, 5).tolist() == [[3, 103], [4, 7]]
    rows.release(3)
    assert (rows.start, rows.end) == (3, 5)
    rows.truncate(1)  # a new text that shares less than what was released
    assert (rows.start, rows.end) == (1, 1)


def test_rows_side_by_side_from_several_layers():
    rows = HiddenRows(5, capacity=8)
    rows.write(0, np.ones((2, 2), np.float32), np.full((2, 3), 2.0, np.float32))
    assert rows.rows(0, 2).tolist() == [[1, 1, 2, 2, 2]] * 2


def test_rows_past_capacity_keep_the_newest():
    rows = HiddenRows(2, capacity=8)
    for position in range(20):
        rows.write(position, row(position, position))
        assert rows.end - rows.start <= 8
    assert (rows.start, rows.end) == (12, 20)
    assert rows.rows(12, 20)[:, 0].tolist() == list(range(12, 20))


def test_rows_after_a_gap_start_over():
    rows = HiddenRows(2, capacity=8)
    rows.write(0, row(0, 1))
    rows.write(5, row(5, 1))  # positions 1-4 were decoded without rows
    assert (rows.start, rows.end) == (5, 6)


# --- what a head takes in ------------------------------------------------------------------


def round_trip(offset: int = 0, gamma: int = 4):
    head = FakeHead(offset=offset)
    rows = HiddenRows(2, capacity=64)
    target = FakeTarget(rows)
    draft = HeadDraft(head, rows, VOCAB)
    prompt = [1, 2, 3, 4, 5, 6]
    target.decode(prompt)  # the prompt's pass
    ctx = Tokens(prompt)
    draft.prefill(ctx.but_last())
    return head, rows, target, draft, ctx


@pytest.mark.parametrize("offset", [0, 1], ids=["eagle3", "mtp"])
def test_prefill_and_first_draft_take_in_every_pair_of_the_prompt(offset):
    head, rows, target, draft, ctx = round_trip(offset)
    ctx.extend([9])  # the first token, from the prompt's logits
    proposal = draft.propose(ctx, 3, GREEDY, np.random.default_rng(0))
    assert len(proposal.tokens) == 3
    held = {p: v for p, v in head.cache.items() if p < len(ctx) - 1 + offset}
    assert held == committed_pairs(head, ctx)
    # Drafting feeds the head its own state: (d_i, state of the pair before) after ctx.
    own = [f for f in head.feeds if f.own]
    assert [f.position for f in own] == [len(ctx) - 1 + offset, len(ctx) + offset]
    assert [f.tokens for f in own] == [[proposal.tokens[0]], [proposal.tokens[1]]]
    assert own[0].states[0, 0] == len(ctx) - 2 + offset  # the last committed pair's output


@pytest.mark.parametrize("offset", [0, 1], ids=["eagle3", "mtp"])
@pytest.mark.parametrize("accepted", range(5))
def test_after_a_rejection_at_any_position_the_head_holds_only_committed_pairs(offset, accepted):
    head, rows, target, draft, ctx = round_trip(offset)
    rng = np.random.default_rng(0)
    ctx.extend([9])
    proposal = draft.propose(ctx, 4, GREEDY, rng)
    for _ in range(3):  # rounds of a generation: draft, verify, commit a prefix and one more
        assert len(proposal.tokens) == 4
        target.decode([*ctx, *proposal.tokens])  # the verify pass writes every drafted row
        correction = (proposal.tokens[accepted] + 1) % VOCAB if accepted < 4 else 11
        ctx.extend([*proposal.tokens[:accepted], correction])
        proposal = draft.propose(ctx, 4, GREEDY, rng)  # takes in what the round committed
        held = {p: v for p, v in head.cache.items() if p < len(ctx) - 1 + offset}
        assert held == committed_pairs(head, ctx)
        # Beyond them only this round's three drafting steps: nothing of the rejected drafts.
        assert len(head.cache) == len(ctx) - 1 + 3


def test_rounds_without_drafts_are_caught_up_in_one_batch_timed_apart():
    head, rows, target, draft, ctx = round_trip()
    rng = np.random.default_rng(0)
    ctx.extend([9])
    draft.propose(ctx, 2, GREEDY, rng)
    for token in (20, 21, 22, 23):  # plain rounds: the target decodes, the head is not asked
        target.decode(list(ctx))
        ctx.extend([token])
    head.feeds.clear()
    proposal = draft.propose(ctx, 2, GREEDY, rng)
    catch_up, last, *_ = head.feeds
    assert not catch_up.own and not last.own
    assert proposal.catch_up_seconds > 0
    assert len(last.tokens) == 3  # a round's worth: the two drafts and the target's token
    assert {p: v for p, v in head.cache.items() if p < len(ctx) - 1} == committed_pairs(head, ctx)


def test_a_new_text_keeps_the_pairs_it_shares():
    head, rows, target, draft, ctx = round_trip()
    rng = np.random.default_rng(0)
    ctx.extend([9, 10, 11])
    target.decode(list(ctx))
    draft.propose(ctx, 2, GREEDY, rng)
    edited = Tokens([1, 2, 3, 30, 31, 32, 33])  # shares its first three tokens
    target.decode(list(edited.but_last()))
    draft.propose(edited, 2, GREEDY, rng)
    assert {p: v for p, v in head.cache.items() if p < len(edited) - 1} == committed_pairs(
        head, edited
    )


def test_rows_the_target_no_longer_keeps_are_skipped():
    head = FakeHead()
    rows = HiddenRows(2, capacity=8)
    target = FakeTarget(rows)
    draft = HeadDraft(head, rows, VOCAB)
    ctx = Tokens(range(1, 21))
    target.decode(list(ctx.but_last()))  # 19 rows through a capacity of 8
    proposal = draft.propose(ctx, 2, GREEDY, np.random.default_rng(0))
    assert len(proposal.tokens) == 2
    assert min(head.cache) == 11  # the oldest row left of 19 through a capacity of 8


def test_confidence_below_p_min_stops_the_draft():
    head, rows, target, draft, ctx = round_trip()
    ctx.extend([9])
    draft.p_min = 1.0  # no row of the fake head is that sure
    assert draft.propose(ctx, 4, GREEDY, np.random.default_rng(0)).tokens == []


# --- the native names ----------------------------------------------------------------------


def test_itanium_names_are_those_libllama_exports():
    """The names the pinned build exports (nm -D on libllama.so), and all of them bind."""
    exported = {
        "llama_set_embeddings_nextn": "_Z26llama_set_embeddings_nextnP13llama_contextbb",
        "llama_get_embeddings_nextn_ith": "_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
        "llama_set_embeddings_layer_inp": "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
        "llama_model_target_layer_ids": "_Z28llama_model_target_layer_idsPK11llama_model",
    }
    by_name = {s.name: s for s in ext.SIGNATURES}
    for name, symbol in exported.items():
        assert by_name[name].mangled("itanium") == symbol
    for signature in ext.SIGNATURES:
        assert ext.function(signature.name) is not None


def test_msvc_names_back_reference_repeated_types():
    by_name = {s.name: s for s in ext.SIGNATURES}
    assert (
        by_name["llama_set_embeddings_nextn"].mangled("msvc")
        == "?llama_set_embeddings_nextn@@YAXPEAUllama_context@@_N1@Z"
    )
    assert (
        by_name["llama_model_target_layer_ids_n"].mangled("msvc")
        == "?llama_model_target_layer_ids_n@@YAIPEBUllama_model@@@Z"
    )
