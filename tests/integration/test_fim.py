"""Fill-in-the-middle prompts against llama-server's: each sequence below is written out by
hand from `format_prompt_infill` (tools/server/server-common.cpp), not from specrun.fim."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from specrun.errors import SpecrunError
from specrun.fim import Infill, infill_tokens
from specrun.llama.model import Model
from tests.support.tinymodels import FIM_TOKENS, N_CTX, write_tiny_model

# llama-server cuts to a batch of 2048; a context of 1024 makes it 512 here (half of it).
BATCH = N_CTX // 2


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Model]]:
    folder = tmp_path_factory.mktemp("fim")
    files = {
        "qwen": write_tiny_model(folder / "qwen.gguf", specials=FIM_TOKENS),  # and rep, sep
        "bare": write_tiny_model(folder / "bare.gguf", specials=FIM_TOKENS[:3]),
        "none": write_tiny_model(folder / "none.gguf"),
    }
    loaded = {name: Model(path, n_ctx=N_CTX, threads=1) for name, path in files.items()}
    yield loaded
    for model in loaded.values():
        model.close()


def ids(model: Model) -> dict[str, int]:
    return {model.token_text(token): token for token in range(model.n_vocab)}


def text(model: Model, value: str) -> list[int]:
    return model.tokenize(value, add_special=False, parse_special=False)


def test_the_order_is_llama_servers_with_the_repository_and_file_markers(models) -> None:
    model = models["qwen"]
    fim = ids(model)
    infill = Infill("the cat is", "and the dog", prompt="blue<|im_end|>")
    expected = [
        fim["<|repo_name|>"],
        *text(model, "myproject\n"),
        fim["<|file_sep|>"],
        *text(model, "filename\n"),
        model.bos,
        fim["<|fim_prefix|>"],
        *text(model, "the cat is"),
        # the prompt, with its special tokens read as such
        *text(model, "blue"),
        fim["<|im_end|>"],
        fim["<|fim_suffix|>"],
        *text(model, "and the dog"),
        fim["<|fim_middle|>"],
    ]
    assert infill_tokens(model, infill, max_tokens=16) == expected


def test_other_files_go_first_each_after_its_name(models) -> None:
    model = models["qwen"]
    fim = ids(model)
    infill = Infill("a", "b", extra=(("x.py", "hello world"), ("y.py", "the sea")))
    expected = [
        fim["<|repo_name|>"],
        *text(model, "myproject\n"),
        fim["<|file_sep|>"],
        *text(model, "x.py\n"),
        *text(model, "hello world"),
        fim["<|file_sep|>"],
        *text(model, "y.py\n"),
        *text(model, "the sea"),
        fim["<|file_sep|>"],
        *text(model, "filename\n"),
        model.bos,
        fim["<|fim_prefix|>"],
        *text(model, "a"),
        fim["<|fim_suffix|>"],
        *text(model, "b"),
        fim["<|fim_middle|>"],
    ]
    assert infill_tokens(model, infill, max_tokens=None) == expected


def test_without_file_markers_other_files_are_snippets(models) -> None:
    model = models["bare"]
    fim = ids(model)
    infill = Infill("a", "b", extra=(("x.py", "hello"),))
    expected = [
        *text(model, "\n\n--- snippet ---\n\n"),
        *text(model, "hello"),
        model.bos,
        fim["<|fim_prefix|>"],
        *text(model, "a"),
        fim["<|fim_suffix|>"],
        *text(model, "b"),
        fim["<|fim_middle|>"],
    ]
    assert infill_tokens(model, infill, max_tokens=None) == expected


def test_the_prefix_keeps_its_end_the_suffix_its_start_the_files_what_fits(models) -> None:
    model = models["bare"]
    long = " ".join(["the cat and the dog"] * 200)
    prefix, suffix, chunk = text(model, long), text(model, long), text(model, long)
    prompt = "sea"
    max_tokens = 100
    tokens = infill_tokens(model, Infill(long, long, prompt, (("f", long),)), max_tokens)
    fim = ids(model)
    start = tokens.index(fim["<|fim_prefix|>"])
    middle = tokens.index(fim["<|fim_suffix|>"])
    kept_prefix = 3 * (BATCH // 4)
    kept_suffix = BATCH // 4 - (2 + len(text(model, prompt)))
    kept_extra = N_CTX - BATCH - 2 * max_tokens
    assert tokens[start + 1 : middle] == [*prefix[-kept_prefix:], *text(model, prompt)]
    assert tokens[middle + 1 : -1] == suffix[:kept_suffix]
    assert tokens[: start - 1] == [*text(model, "\n\n--- snippet ---\n\n"), *chunk][-kept_extra:]
    assert len(tokens) < N_CTX - max_tokens  # the answer fits


def test_a_model_without_fim_tokens_cannot_infill(models) -> None:
    with pytest.raises(SpecrunError, match="cannot fill in the middle: .* no FIM prefix"):
        infill_tokens(models["none"], Infill("a", "b"), max_tokens=None)


def test_the_tiny_models_fim_tokens_are_found_by_their_text(tmp_path: Path) -> None:
    """llama.cpp's own lookup (no GGUF key names them), which Qwen's GGUFs rely on too."""
    with Model(write_tiny_model(tmp_path / "m.gguf", specials=FIM_TOKENS), threads=1) as model:
        tokens = infill_tokens(model, Infill("", ""), max_tokens=None)
        assert [model.token_text(t) for t in tokens if model.is_special(t)] == [
            "<|repo_name|>",
            "<|file_sep|>",
            "<s>",
            "<|fim_prefix|>",
            "<|fim_suffix|>",
            "<|fim_middle|>",
        ]
