"""A model's vocabulary over llama.cpp: tokenizing, token text and the special ids, shared by
every native model that holds a `llama_vocab` (a target or draft `Model`, an EAGLE-3 head)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import llama_cpp as llama

VOCAB_TYPES = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLaMo2"}
# What llama.cpp's parse_special splits out of text as tokens of their own (llama-vocab.cpp).
SPECIAL_ATTRIBUTES = (
    llama.LLAMA_TOKEN_ATTR_CONTROL
    | llama.LLAMA_TOKEN_ATTR_USER_DEFINED
    | llama.LLAMA_TOKEN_ATTR_UNKNOWN
)


class Vocabulary:
    """The vocabulary calls of a native model whose `_vocab` is its `llama_vocab`."""

    name: str

    def _bind_vocabulary(self, vocab: int) -> None:
        self._vocab = vocab
        self.n_vocab: int = llama.llama_vocab_n_tokens(vocab)

    @property
    def vocab(self) -> int:
        """The native `llama_vocab *` (a grammar reads its tokens' text through it)."""
        return self._vocab

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        while True:
            buf = (llama.llama_token * capacity)()
            n = llama.llama_tokenize(
                self._vocab, data, len(data), buf, capacity, add_special, parse_special
            )
            if n >= 0:
                return list(buf[:n])
            capacity = -n

    def _piece(self, token: int) -> bytes:
        """The bytes a token stands for (special tokens such as EOS render as nothing)."""
        size = 32
        while True:
            buf = ctypes.create_string_buffer(size)
            n = llama.llama_token_to_piece(self._vocab, token, buf, size, 0, False)
            if n >= 0:
                return buf.raw[:n]
            size = -n

    def token_text(self, token: int) -> str:
        """The vocabulary's text for a token, special tokens included (e.g. '<|im_end|>')."""
        return (llama.llama_vocab_get_text(self._vocab, token) or b"").decode(
            "utf-8", errors="replace"
        )

    def shown_specials(self, texts: Sequence[str]) -> dict[int, bytes]:
        """Of `texts`, those that are one special token rendering as nothing in text: that
        token, and the text's bytes (what a Detokenizer shows for it)."""
        shown = {}
        for text in texts:
            tokens = self.tokenize(text, add_special=False, parse_special=True)
            if len(tokens) == 1 and not self._piece(tokens[0]):
                shown[tokens[0]] = text.encode()
        return shown

    def is_special(self, token: int) -> bool:
        """A token that tokenize(parse_special=True) makes of its text (<|im_end|>, say)."""
        return bool(llama.llama_vocab_get_attr(self._vocab, token) & SPECIAL_ATTRIBUTES)

    def strips_spaces(self, token: int) -> tuple[bool, bool]:
        """Whether the special token swallows the whitespace before it, and after it (Phi-3's
        do)."""
        attributes = llama.llama_vocab_get_attr(self._vocab, token)
        return bool(attributes & llama.LLAMA_TOKEN_ATTR_LSTRIP), bool(
            attributes & llama.LLAMA_TOKEN_ATTR_RSTRIP
        )

    def _is_eog(self, token: int) -> bool:
        """Whether the token ends a generation (EOS, <|im_end|>, ...): `is_eog`, cached."""
        return bool(llama.llama_vocab_is_eog(self._vocab, token))

    @property
    def bos(self) -> int:
        token: int = llama.llama_vocab_bos(self._vocab)
        return token

    @property
    def eos(self) -> int:
        token: int = llama.llama_vocab_eos(self._vocab)
        return token

    @property
    def add_bos(self) -> bool:
        return bool(llama.llama_vocab_get_add_bos(self._vocab))

    @property
    def add_eos(self) -> bool:
        return bool(llama.llama_vocab_get_add_eos(self._vocab))

    @property
    def vocab_type(self) -> str:
        return VOCAB_TYPES.get(llama.llama_vocab_type(self._vocab), "unknown")
