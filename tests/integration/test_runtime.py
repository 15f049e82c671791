"""The llama.cpp runtime on tiny generated models: the KV cache as a cache of a token
sequence, detokenization, and the draft compatibility check."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specrun.core.sequence import Tokens
from specrun.core.text import Detokenizer
from specrun.errors import SpecrunError
from specrun.llama.compat import check_compatible
from specrun.llama.model import Model


@pytest.fixture(scope="module")
def cached(tiny_target):
    with Model(tiny_target, n_ctx=256, n_batch=8) as model:  # small batches: prompts span chunks
        yield model


@pytest.fixture(scope="module")
def fresh(tiny_target):
    with Model(tiny_target, n_ctx=256) as model:
        yield model


def fresh_logits(model: Model, seq: list[int], last: int) -> np.ndarray:
    model.reset()
    return model.logits(seq, last)


def assert_close(actual: np.ndarray, expected: np.ndarray) -> None:
    # Batch shapes change llama.cpp's summation order: equal up to float32 rounding.
    np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-3)


token_ids = st.integers(min_value=3, max_value=330)
steps = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=40),
        st.lists(token_ids, min_size=1, max_size=12),
        st.integers(min_value=1, max_value=4),
    ),
    min_size=1,
    max_size=6,
)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # the same examples on every run
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(start=st.lists(token_ids, min_size=2, max_size=30), steps=steps)
def test_cache_after_any_rollbacks_equals_fresh_evaluation(cached, fresh, start, steps):
    """Arbitrary extend/rollback sequences: the cached logits equal a fresh evaluation."""
    seq = [1] + start
    assert_close(cached.logits(seq, 1), fresh_logits(fresh, seq, 1))
    for keep, extension, last in steps:
        seq = seq[: max(1, len(seq) - keep)] + extension
        last = min(last, len(seq))
        logits = cached.logits(seq, last)
        assert cached.tokens == seq
        assert_close(logits, fresh_logits(fresh, seq, last))


def test_a_view_holds_the_same_logits_as_a_copy(cached, fresh):
    """view=True hands out llama.cpp's buffer where one decode makes every row asked for,
    and otherwise (rows over several decodes of n_batch 8) assembles a copy."""
    seq = list(range(3, 40))
    for last in (1, 5, 12):  # 12 rows: two decodes
        cached.reset()
        rows = cached.logits(seq, last, view=True)
        assert rows.shape == (last, cached.n_vocab)
        assert rows.flags.owndata == (last > cached.n_batch)
        assert_close(rows, fresh_logits(fresh, seq, last))


def test_only_the_new_suffix_is_evaluated(tiny_target):
    with Model(tiny_target, n_ctx=256) as model:
        prompt = model.tokenize("the sea is blue and the sun is big")
        model.logits(prompt, 1)
        before = model.n_evaluated
        model.logits(prompt + [300, 301], 3)
        assert model.n_evaluated - before == 3  # the last cached position is re-read for its logits
        model.logits(prompt[:5] + [302], 1)  # roll back and branch
        assert model.tokens == prompt[:5] + [302]


def test_the_cache_is_cut_only_where_it_may_hold_more(tiny_target, fresh, monkeypatch):
    """A round that only extends the sequence makes no call to drop cached positions; a
    decode interrupted before `tokens` took it in leaves positions that the next call drops."""
    with Model(tiny_target, n_ctx=256) as model:
        drops: list[int] = []
        drop = model._drop
        monkeypatch.setattr(
            model, "_drop", lambda cache, keep: drops.append(keep) or drop(cache, keep)
        )
        seq = model.tokenize("the sea is blue and the sun is big")
        model.logits(seq, 1)
        model.logits(seq := seq + [300], 1)
        assert drops == []
        model.logits(seq[:-3] + [301], 1)  # a rollback
        assert drops == [len(seq) - 3]

        seq = seq[:-3] + [301]
        decode = model.batch._decode

        def cut_short() -> int:
            decode()  # the positions are written, then Ctrl-C arrives before they are recorded
            raise KeyboardInterrupt

        monkeypatch.setattr(model.batch, "_decode", cut_short)
        with pytest.raises(KeyboardInterrupt):
            model.logits(seq + [302, 303], 1)
        monkeypatch.setattr(model.batch, "_decode", decode)
        drops.clear()
        assert_close(model.logits(seq + [304], 1), fresh_logits(fresh, seq + [304], 1))
        assert drops == [len(seq)]


def test_the_first_decode_of_each_batch_shape_is_flagged(tiny_target):
    with Model(tiny_target, n_ctx=256) as model:
        seq = model.tokenize("the sea is blue and the sun is big")
        model.logits(seq, 1)
        for width, first in ((1, True), (1, False), (3, True), (1, False), (3, False), (2, True)):
            seq = seq + [300] * width
            model.logits(seq, width)
            assert model.first_of_shape == first, (width, first)
        model.logits(seq + [301, 302], 1)  # 3 positions, 1 with logits: another shape
        assert model.first_of_shape


def test_prompt_longer_than_context_is_refused(tiny_target):
    with Model(tiny_target, n_ctx=32) as model:  # llama.cpp rounds the context up to 256
        with pytest.raises(SpecrunError, match="exceeds the context"):
            model.logits([5] * (model.n_ctx + 1), 1)


def test_multibyte_utf8_streams_intact(tiny_target):
    text = "naïve café — 日本語 😀 ok"
    with Model(tiny_target, n_ctx=256) as model:
        tokens = model.tokenize(text, add_special=False)
        assert len(tokens) > len(text)  # byte fallback: characters span several tokens
        detokenizer = Detokenizer(model)
        pieces = [detokenizer.add(t) for t in tokens] + [detokenizer.flush()]
        assert "".join(pieces).strip() == text
        assert all("\ufffd" not in piece for piece in pieces)  # never half a character


def test_special_tokens_parse_only_when_asked(tiny_target):
    with Model(tiny_target, n_ctx=256) as model:
        im_start = model.tokenize("<|im_start|>", add_special=False, parse_special=True)
        assert im_start == [3]
        assert model.tokenize("<|im_start|>", add_special=False) != [3]
        assert model.is_eog(model.eos) and model.is_eog(4)  # </s> and <|im_end|>


def test_compatible_draft_passes_and_padding_is_allowed(tiny_target, tiny_draft, tiny_draft_padded):
    with Model(tiny_target, n_ctx=64) as target:
        for draft_path in (tiny_draft, tiny_draft_padded):
            with Model(draft_path, n_ctx=64) as draft:
                check_compatible(target, draft)


def test_incompatible_draft_names_what_differs(tiny_target, tiny_foreign, tiny_dir):
    from tests.support.tinymodels import write_tiny_model

    with Model(tiny_target, n_ctx=64) as target:
        with Model(tiny_foreign, n_ctx=64) as foreign:
            with pytest.raises(SpecrunError, match=r"token \d+ is '▁the' vs '▁thex'"):
                check_compatible(target, foreign)
        with Model(write_tiny_model(tiny_dir / "wide.gguf", extra_vocab=200), n_ctx=64) as wide:
            with pytest.raises(SpecrunError, match="vocabulary size 342 vs 542"):
                check_compatible(target, wide)
        with Model(write_tiny_model(tiny_dir / "eos.gguf", eos_id=4), n_ctx=64) as other_eos:
            with pytest.raises(SpecrunError, match="EOS token 2 vs 4"):
                check_compatible(target, other_eos)
        with Model(write_tiny_model(tiny_dir / "nobos.gguf", add_bos=False), n_ctx=64) as nobos:
            # Only what differs is named: the BOS token is the same, adding it is not.
            with pytest.raises(
                SpecrunError, match=r"match target target.gguf: BOS added yes vs no$"
            ):
                check_compatible(target, nobos)


def test_bad_files_give_clear_errors(tmp_path, tiny_target):
    with pytest.raises(SpecrunError, match="model file not found"):
        Model(tmp_path / "missing.gguf")
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    with pytest.raises(SpecrunError, match="is not a GGUF file"):
        Model(text)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(tiny_target.read_bytes()[:20_000])
    with pytest.raises(SpecrunError, match="truncated, corrupt or unsupported"):
        Model(truncated)


@given(
    base=st.lists(token_ids, max_size=12),
    tail=st.lists(token_ids, max_size=6),
    more=st.lists(token_ids, max_size=4),
    start=st.integers(-20, 20),
    stop=st.integers(-20, 20),
    step=st.sampled_from([1, 2, -1]),
)
def test_a_continuation_reads_as_the_list_it_stands_for(base, tail, more, start, stop, step):
    tokens = Tokens(base)
    continuation = tokens.then(tail)
    tokens.extend(more)  # appending to the base does not change a continuation taken before
    expected = base + tail
    assert len(continuation) == len(expected)
    assert continuation[start:stop:step] == expected[start:stop:step]
    n = len(expected)
    assert (
        [continuation[i] for i in range(n)] == [continuation[i - n] for i in range(n)] == expected
    )
    assert list(tokens) == tokens[:] == base + more


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    start=st.lists(token_ids, min_size=2, max_size=30),
    steps=steps,
    edits=st.lists(st.booleans(), max_size=6),
)
def test_continuations_and_unrelated_sequences_keep_the_cache_exact(
    cached, fresh, start, steps, edits
):
    """The loop's append-only context with rolled-back drafts, interleaved with plain lists
    that edit it (a chat turn, another prompt): the cached logits equal a fresh evaluation."""
    ctx = Tokens([1] + start)
    for (commit, draft, last), edit in zip(steps, edits + [False] * len(steps)):
        seq = ctx.then(draft)
        last = min(last, len(seq))
        assert_close(cached.logits(seq, last), fresh_logits(fresh, list(seq), last))
        assert cached.tokens == list(seq)
        ctx.extend(draft[: commit % (len(draft) + 1)])
        if edit:  # someone else's sequence, differing early on; the next continuation must notice
            other = [1, 7] + list(ctx)[2:]
            cached.logits(other, 1)
            assert cached.tokens == other
