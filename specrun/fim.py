"""Fill-in-the-middle prompts: the text before the cursor and after it, as the token ids of a
model trained to write what goes between (its vocabulary's FIM tokens), in the order and with
the cuts llama-server's /infill uses (`format_prompt_infill` in its server-common.cpp), so that
an editor's autocomplete gets the prompt it would get there. Beside `prompt.py`: both make
a request's text into the tokens the engine is given, and nothing below them is about prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

import llama_cpp as llama

from specrun.errors import SpecrunError
from specrun.llama.model import Model

# llama-server's: the batch its FIM prompt is cut to fit (its default --batch-size), of which
# the prefix keeps its last 3/4 and the suffix its first 1/4; here at most half the context,
# so that a small one keeps room for the other files and the answer.
LLAMA_SERVER_BATCH = 2048
# What llama-server writes where llama.cpp names no repository and no file (its TODOs).
PROJECT, FILENAME = "myproject\n", "filename\n"
# Between other files' text where the vocabulary has no file separator: "\n\n--- snippet ---\n\n".
SNIPPET = "\n\n--- snippet ---\n\n"


@dataclass(frozen=True)
class Infill:
    """What a fill-in-the-middle request gives: the text before the cursor and after it, the
    start of the middle already typed (`prompt`, llama-server's), and other files' text that
    may help (`extra`: (file name, text) each)."""

    prefix: str
    suffix: str
    prompt: str = ""
    extra: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class FimTokens:
    """A vocabulary's FIM tokens (llama.cpp's `llama_vocab_fim_*`, from the GGUF's keys or
    found by their text): prefix, suffix and middle, which infilling needs; and the
    repository's and a file's separators, which some models have (Qwen2.5-Coder)."""

    pre: int
    suf: int
    mid: int
    rep: int | None
    sep: int | None

    @classmethod
    def of(cls, model: Model) -> FimTokens:
        """The model's, or the error that says it cannot infill."""
        vocab = model.vocab

        def token(found: int) -> int | None:
            return None if found == llama.LLAMA_TOKEN_NULL else found

        pre, suf, mid = (
            token(llama.llama_vocab_fim_pre(vocab)),
            token(llama.llama_vocab_fim_suf(vocab)),
            token(llama.llama_vocab_fim_mid(vocab)),
        )
        if pre is None or suf is None or mid is None:
            missing = [
                n for n, t in (("prefix", pre), ("suffix", suf), ("middle", mid)) if t is None
            ]
            raise SpecrunError(
                f"{model.name} cannot fill in the middle: its vocabulary has no FIM "
                f"{', '.join(missing)} token (a code model trained for it has them: "
                "Qwen2.5-Coder, CodeLlama, StarCoder2, DeepSeek-Coder, Codestral)"
            )
        rep = token(llama.llama_vocab_fim_rep(vocab))
        sep = token(llama.llama_vocab_fim_sep(vocab))
        return cls(pre, suf, mid, rep, sep)


def infill_tokens(model: Model, infill: Infill, max_tokens: int | None) -> list[int]:
    """llama-server's prefix-suffix-middle order: the other files (the last of them that fit),
    BOS where the vocabulary adds one, FIM prefix, the prefix's end, the prompt, FIM suffix, the
    suffix's start, FIM middle. The prefix and suffix are text (a `<|fim_middle|>` in the code
    is no token); the prompt is tokenized with its special tokens, as llama-server does."""
    fim = FimTokens.of(model)

    def text(value: str) -> list[int]:
        return model.tokenize(value, add_special=False, parse_special=False)

    batch = min(LLAMA_SERVER_BATCH, model.n_ctx // 2)
    prompt = model.tokenize(infill.prompt, add_special=False, parse_special=True)
    prefix, suffix = text(infill.prefix), text(infill.suffix)
    prefix = prefix[len(prefix) - min(len(prefix), 3 * (batch // 4)) :]
    suffix = suffix[: max(0, batch // 4 - (2 + len(prompt)))]
    extra = [fim.rep, *text(PROJECT)] if fim.rep is not None else []
    for filename, chunk in infill.extra:
        extra += [fim.sep, *text(filename + "\n")] if fim.sep is not None else text(SNIPPET)
        extra += text(chunk)
    if fim.sep is not None:
        extra += [fim.sep, *text(FILENAME)]
    room = max(0, model.n_ctx - batch - 2 * (max_tokens or 0))
    bos = [model.bos] if model.add_bos else []
    return [
        *extra[len(extra) - min(room, len(extra)) :],
        *bos,
        fim.pre,
        *prefix,
        *prompt,
        fim.suf,
        *suffix,
        fim.mid,
    ]
