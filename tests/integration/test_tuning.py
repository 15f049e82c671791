"""The memory and speed knobs reach llama.cpp: each read back where llama.cpp lets us (the
KV cache's bytes a position, the context, the batch threads, the file mapped or not, the
memory locked, its log), and speculation stays exact at a quantized KV cache.

A quantized KV cache changes the model's numbers, so greedy text at q8_0 may differ from
f16's: what stays exact is speculation against plain decoding at the same types."""

from __future__ import annotations

import resource
import shutil
from pathlib import Path

import llama_cpp as llama
import pytest

from specrun.core.drafting import ModelDraft
from specrun.core.gamma import FixedGamma
from specrun.engine import Engine
from specrun.errors import OptionError
from specrun.llama.footprint import kv_bytes_per_layer
from specrun.llama.gguf import tensors_and_metadata
from specrun.llama.model import Model
from specrun.llama.placement import PlacementError
from specrun.llama.tuning import CacheTypes, Rope, Tuning
from specrun.options import LoadOptions
from tests.support.identity import assert_greedy_identical, greedy_tokens

Q8 = Tuning(cache=CacheTypes("q8_0", "q8_0"))
CELL_META = 12  # bytes a sequence's state writes for each cell: its position and sequences


def sequence_bytes(model: Model, tokens: int) -> int:
    model.logits(list(range(10, 10 + tokens)), 1)
    return llama.llama_state_seq_get_size(model.context, 0)


@pytest.mark.parametrize(
    "cache",
    [CacheTypes(), CacheTypes("q8_0", "q8_0"), CacheTypes("q4_0", "f16")],
    ids=lambda c: f"{c.k}-{c.v}",
)
def test_the_kv_cache_holds_a_position_in_the_bytes_the_rule_counts(demo_pair, cache):
    target = demo_pair[0]
    meta = tensors_and_metadata(target)[1]
    with Model(target, n_ctx=256, threads=1, tuning=Tuning(cache=cache)) as model:
        grown = sequence_bytes(model, 48) - sequence_bytes(model, 16)
        assert grown == 32 * (model.n_layer * kv_bytes_per_layer(meta, 1, cache) + CELL_META)


def test_speculation_is_exact_against_plain_decoding_at_a_q8_0_cache(demo_pair):
    target_path, draft_path = demo_pair
    with (
        Model(target_path, n_ctx=512, threads=1, tuning=Q8) as target,
        Model(draft_path, n_ctx=512, threads=1, tuning=Q8) as draft,
    ):
        prompt = target.tokenize("The three primary colors are")
        plain, _ = greedy_tokens(target, prompt, max_tokens=32)
        speculative, rounds = greedy_tokens(
            target, prompt, ModelDraft(draft, target.n_vocab), FixedGamma(4), 32
        )
        assert assert_greedy_identical(target, prompt, plain, speculative, 1e-3) == "identical"
        assert sum(r.accepted for r in rounds) > 0  # the draft really was used


def test_the_engine_hands_the_knobs_to_the_target_and_the_draft(demo_pair):
    options = LoadOptions(
        n_ctx=256,
        threads=1,
        tuning=Tuning(cache=CacheTypes("q8_0", "q8_0"), threads_batch=2),
        draft_cache=CacheTypes("q4_0", "q4_0"),
    )
    with Engine.load(*demo_pair, options=options, announce=lambda line: None) as engine:
        target, draft = engine.target, engine.draft_models[0]
        assert (target.tuning.cache, draft.tuning.cache) == (
            CacheTypes("q8_0", "q8_0"),
            CacheTypes("q4_0", "q4_0"),
        )
        assert target.threads_batch == draft.threads_batch == 2  # llama_n_threads_batch
        meta = tensors_and_metadata(demo_pair[1])[1]
        assert sequence_bytes(draft, 40) - sequence_bytes(draft, 8) == (
            32 * (draft.n_layer * kv_bytes_per_layer(meta, 1, draft.tuning.cache) + CELL_META)
        )


def test_the_memory_rule_refuses_a_kv_cache_past_the_memory_before_loading(demo_pair):
    # A base frequency chosen for it lets the context past the trained 8192: 10^8 positions
    # of 23 KB each are far more than this machine has.
    options = LoadOptions(n_ctx=10**8, tuning=Tuning(rope=Rope(freq_base=1e7)))
    with pytest.raises(PlacementError, match=r"needs [\d.]+ GB of system memory, its KV cache"):
        Engine.load(demo_pair[0], None, options=options, announce=lambda line: None)


def test_rope_scaling_reaches_past_the_trained_context(tiny_target):
    with Model(tiny_target, n_ctx=4096, threads=1) as plain:
        assert llama.llama_n_ctx(plain.context) == plain.n_ctx == 1024  # the trained context
    stretched = Tuning(rope=Rope(scaling="linear", freq_scale=0.25))
    with Model(tiny_target, n_ctx=8192, threads=1, tuning=stretched) as model:
        assert llama.llama_n_ctx(model.context) == model.n_ctx == model.n_ctx_reach == 4096
        assert model.logits([10 + i % 300 for i in range(2000)], 1).shape == (1, model.n_vocab)
    with pytest.raises(OptionError, match="`rope_scaling` yarn needs a factor"):
        Model(tiny_target, n_ctx=4096, threads=1, tuning=Tuning(rope=Rope(scaling="yarn")))


def test_flash_attention_and_rope_reach_llama_cpp(tiny_target, capfd):
    tuning = Tuning(flash_attn="off", rope=Rope(scaling="yarn", freq_scale=0.5))
    with Model(tiny_target, n_ctx=2048, threads=1, tuning=tuning, verbose=True) as model:
        assert model.n_ctx == 2048
    log = capfd.readouterr().err
    assert "flash_attn            = disabled" in log
    assert "freq_scale            = 0.5" in log
    assert "n_ctx_train adjusted to 2048" in log  # YaRN's reach, as specrun counts it
    with Model(tiny_target, n_ctx=256, threads=1, tuning=Tuning(flash_attn="on"), verbose=True):
        pass
    assert "flash_attn            = enabled" in capfd.readouterr().err


def test_a_quantized_cache_refuses_heads_its_blocks_do_not_divide(tiny_target):
    with pytest.raises(OptionError, match="blocks of 32 values, which do not divide"):
        Model(tiny_target, n_ctx=256, threads=1, tuning=Q8)  # heads of 16 values


def mapped(path: Path) -> bool:
    return str(path) in Path("/proc/self/maps").read_text()


def locked_kib() -> int:
    status = Path("/proc/self/status").read_text().splitlines()
    return int(next(line for line in status if line.startswith("VmLck:")).split()[1])


def test_mmap_and_mlock_reach_the_load(tiny_target, tmp_path):
    # A file of this test's own: no other test's model maps it.
    path = shutil.copy(tiny_target, tmp_path / "own.gguf")
    with Model(path, n_ctx=256, threads=1):
        assert mapped(Path(path))
    with Model(path, n_ctx=256, threads=1, tuning=Tuning(mmap=False)):
        assert not mapped(Path(path))
    if resource.getrlimit(resource.RLIMIT_MEMLOCK)[0] != resource.RLIM_INFINITY:
        size = Path(path).stat().st_size
        if resource.getrlimit(resource.RLIMIT_MEMLOCK)[0] < 2 * size:
            pytest.skip("RLIMIT_MEMLOCK is below the model's size: llama.cpp cannot lock it")
    before = locked_kib()
    with Model(path, n_ctx=256, threads=1, tuning=Tuning(mlock=True)):
        # The tensor data locked: all of the file but its header.
        assert mapped(Path(path)) and locked_kib() - before > 0.9 * Path(path).stat().st_size / 1024
