"""llama.cpp's GBNF grammars as the round loop's `Constraint`, and the grammars of JSON and of
a JSON schema (llama-cpp-python's converter, a port of llama.cpp's own).

A grammar is llama.cpp's grammar sampler used for two of its operations only: `apply` on a
few candidate tokens (those it refuses get a logit of -inf) says which may come next, and
`accept` moves its state on by a token. `fork` clones the state, so drafts and verification
work on copies and a rejected draft is a copy dropped. Sampling stays specrun's own.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import llama_cpp as llama
import numpy as np
from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

from specrun.core.constraint import ConstraintError
from specrun.errors import SpecrunError
from specrun.llama.grammar_limits import GrammarLimitError, check_gbnf, check_schema
from specrun.llama.native import clear_log, log_lines
from specrun.llama.schemas import SchemaError, converter_ready
from specrun.llama.vocab import Vocabulary

JSON_GRAMMAR = JSON_GBNF  # any JSON value, as llama.cpp's grammars/json.gbnf
CONVERTED_KEPT = 64  # schemas' grammars kept: an agent sends the same tools every turn
ERROR_LENGTH = 200  # of the converter's own words, which may quote the schema whole
START_CHUNK = 1024  # tokens checked at a time for one that a new grammar allows


class GrammarError(ConstraintError):
    """A grammar or JSON schema that cannot constrain an answer (it does not parse, costs more
    than the limits allow, or allows nothing): the input's fault, said in one line."""


def schema_grammar(schema: dict[str, Any] | bool) -> str:
    """The GBNF grammar of the JSON documents a JSON schema allows; a schema it cannot
    convert, or whose grammar would cost more than `grammar_limits` allows, is an error that
    says why."""
    try:
        check_schema(schema)
        return _converted(json.dumps(converter_ready(schema)))
    except (GrammarLimitError, SchemaError) as error:
        raise GrammarError(str(error)) from None


@lru_cache(maxsize=CONVERTED_KEPT)
def _converted(schema: str) -> str:
    try:
        gbnf = str(json_schema_to_gbnf(schema))
    except Exception as error:  # the converter's every failure on a schema is the schema's
        said = " ".join(str(error).split())[:ERROR_LENGTH] or type(error).__name__
        raise GrammarError(f"the JSON schema cannot be turned into a grammar: {said}") from None
    check_gbnf(gbnf)
    return gbnf


@contextmanager
def _stderr_kept() -> Iterator[Any]:
    """Hold what native code writes to stderr meanwhile (llama.cpp's grammar parser prints
    its error there, which would break the one-line error); `printed()` reads it after. What
    was not the parser's is written to stderr after all."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        text: list[str] = []
        try:
            yield lambda: "".join(text)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text.append(held.read().decode("utf-8", errors="replace"))
            others = "" if "error parsing grammar" in text[0] else text[0]
            if others:
                os.write(2, others.encode("utf-8"))


def _parse_error(printed: str) -> str:
    """The parser's message (`parse: error parsing grammar: expecting ')' at`), without the
    grammar it repeats after it."""
    for line in printed.splitlines():
        if "error parsing grammar:" in line:
            return line.split("error parsing grammar:", 1)[1].strip().removesuffix(" at")
    return ""


class Grammar:
    """A GBNF grammar's state over a model's vocabulary: which tokens may come next."""

    def __init__(self, vocabulary: Vocabulary, gbnf: str, root: str = "root") -> None:
        self._vocabulary = vocabulary
        try:
            check_gbnf(gbnf)  # what llama.cpp's recursive parser could not survive
        except GrammarLimitError as error:
            raise GrammarError(str(error)) from None
        clear_log()
        with _stderr_kept() as printed:
            sampler = llama.llama_sampler_init_grammar(
                vocabulary.vocab, gbnf.encode("utf-8"), root.encode("utf-8")
            )
        if not sampler:
            why = _parse_error(printed()) or next(
                (line for line in reversed(log_lines()) if "grammar" in line), ""
            )
            raise GrammarError(
                "the grammar does not parse" + (f": {why}" if why else "") + " (GBNF, with a "
                f"`{root}` rule: github.com/ggml-org/llama.cpp/blob/master/grammars/README.md)"
            )
        self._sampler: llama.llama_sampler_p | None = sampler
        self._data = (llama.llama_token_data * 0)()
        self._view: Any = None  # a structured array over _data: id, logit, p
        if not self._allows_any():
            self.close()
            raise GrammarError(
                "the grammar allows no token of the model's vocabulary at the start of the "
                "answer, so no answer can keep to it"
            )

    def _allows_any(self) -> bool:
        """Whether some token may come first (the chunk that holds one is usually the first:
        a vocabulary's single bytes and characters come early)."""
        return any(
            self.allows(np.arange(start, min(start + START_CHUNK, self._vocabulary.n_vocab))).any()
            for start in range(0, self._vocabulary.n_vocab, START_CHUNK)
        )

    @classmethod
    def _of(cls, vocabulary: Vocabulary, sampler: llama.llama_sampler_p) -> Grammar:
        grammar = cls.__new__(cls)
        grammar._vocabulary, grammar._sampler = vocabulary, sampler
        grammar._data, grammar._view = (llama.llama_token_data * 0)(), None
        return grammar

    def allows(self, tokens: np.ndarray) -> np.ndarray:
        if self._view is None or len(tokens) > len(self._data):  # kept for the widest yet
            self._data = (llama.llama_token_data * max(len(tokens), 64))()
            self._view = np.ctypeslib.as_array(self._data)
        view = self._view[: len(tokens)]
        view["id"] = tokens
        view["logit"] = 0.0
        candidates = llama.llama_token_data_array(self._data, len(tokens), -1, False)
        llama.llama_sampler_apply(self._sampler, ctypes.byref(candidates))
        allowed: np.ndarray = np.isfinite(view["logit"])
        return allowed

    def accept(self, token: int) -> None:
        # llama.cpp aborts the process on a token its grammar refuses: refused here instead.
        if not self.allows(np.array([token]))[0]:
            text = self._vocabulary.token_text(token)
            raise SpecrunError(f"the grammar does not allow {text!r} (token {token}) here")
        llama.llama_sampler_accept(self._sampler, token)

    def fork(self) -> Grammar:
        return Grammar._of(self._vocabulary, llama.llama_sampler_clone(self._sampler))

    def close(self) -> None:
        sampler, self._sampler = getattr(self, "_sampler", None), None  # None: never made
        if sampler:
            llama.llama_sampler_free(sampler)

    def __del__(self) -> None:
        self.close()
