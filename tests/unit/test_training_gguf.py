"""What `specrun heads train` reads of a target's GGUF (training.gguf_io.read_target): its
shape where the file gives it in other forms than llama's, and one line where it cannot."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from specrun.errors import SpecrunError
from specrun.training.gguf_io import read_target

EMBD, VOCAB = 8, 16


def write_target(path: Path, feed_forward: int | list[int] | None, norm: bool = True) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_embedding_length(EMBD)
    writer.add_head_count(2)
    writer.add_context_length(64)
    if isinstance(feed_forward, list):
        writer.add_array("llama.feed_forward_length", feed_forward)
    elif feed_forward is not None:
        writer.add_feed_forward_length(feed_forward)
    writer.add_tensor("token_embd.weight", np.ones((VOCAB, EMBD), np.float16))
    if norm:
        writer.add_tensor("output_norm.weight", np.ones(EMBD, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(
    "feed_forward, n_ff", [(24, 24), ([12, 40, 20], 40), (None, 8 * EMBD // 3)]
)
def test_the_heads_ffn_width_comes_from_any_form_of_the_targets(tmp_path, feed_forward, n_ff):
    target = read_target(write_target(tmp_path / "t.gguf", feed_forward))
    assert (target.n_ff, target.n_embd, target.n_head, target.n_head_kv) == (n_ff, EMBD, 2, 2)
    assert target.embeddings.shape == (VOCAB, EMBD) and target.embeddings.flags.writeable
    assert target.output is None  # tied: the head starts from the embeddings
    assert (target.name, target.rope_base) == ("", 10000.0)  # unnamed, llama.cpp's defaults


def test_a_target_without_what_a_head_starts_from_is_one_line(tmp_path):
    with pytest.raises(SpecrunError, match="no token embeddings or output norm"):
        read_target(write_target(tmp_path / "t.gguf", 24, norm=False))
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf at all")
    with pytest.raises(SpecrunError, match="cannot read junk.gguf as GGUF"):
        read_target(tmp_path / "junk.gguf")
