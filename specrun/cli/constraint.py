"""The answer's constraint as the command line gives it, read and checked against the grammar
limits before the models load: `--grammar` and `--json-schema` take the text itself, as
llama.cpp's do, or a file, as they did here before; `--grammar-file` and `-jf/--json-schema-file`
take a file.

Text and a path are told apart by the text alone, never by what is on disk (a file that
happens to be named like the text would change its meaning): GBNF always has a rule
(`::=`), a JSON schema given inline is an object (`{`), and a file's name has neither."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specrun.errors import OptionError


@dataclass(frozen=True)
class ConstraintOptions:
    """The four options as given (None: not given)."""

    grammar: str | None = None  # --grammar: GBNF text, or a file
    grammar_file: Path | None = None  # --grammar-file
    schema: str | None = None  # --json-schema: a JSON object, or a file
    schema_file: Path | None = None  # -jf/--json-schema-file

    def given(self) -> list[str]:
        flags = ("--grammar", "--grammar-file", "--json-schema", "--json-schema-file")
        values = (self.grammar, self.grammar_file, self.schema, self.schema_file)
        return [flag for flag, value in zip(flags, values) if value is not None]


def is_inline_grammar(value: str) -> bool:
    return "::=" in value


def is_inline_schema(value: str) -> bool:
    return value.lstrip().startswith("{")


def grammar_of(options: ConstraintOptions) -> str | None:
    """The GBNF text the options ask for (a JSON schema's converted, checked now, before the
    models load); one option at most."""
    given = options.given()
    if len(given) > 1:
        raise OptionError(f"{given[0]} and {given[1]} each constrain the answer: give one")
    if options.grammar is not None and is_inline_grammar(options.grammar):
        return _checked_gbnf(options.grammar, "--grammar")
    grammar_file = options.grammar_file or (
        Path(options.grammar) if options.grammar is not None else None
    )
    if grammar_file is not None:
        return _grammar_file(grammar_file, given[0])
    if options.schema is not None and is_inline_schema(options.schema):
        return _schema_grammar(options.schema, "--json-schema")
    schema_file = options.schema_file or (
        Path(options.schema) if options.schema is not None else None
    )
    if schema_file is None:
        return None
    from specrun.llama.grammar_limits import MAX_SCHEMA_BYTES
    from specrun.system.textio import read_text

    text = read_text(schema_file, "JSON schema", error=OptionError, limit=MAX_SCHEMA_BYTES)
    return _schema_grammar(text, f"{given[0]} {schema_file}")


def _grammar_file(path: Path, flag: str) -> str:
    from specrun.llama.grammar_limits import MAX_GRAMMAR_BYTES
    from specrun.system.textio import read_text

    grammar = read_text(path, "grammar", error=OptionError, limit=MAX_GRAMMAR_BYTES)
    return _checked_gbnf(grammar, f"{flag} {path}")


def _checked_gbnf(grammar: str, where: str) -> str:
    from specrun.llama.grammar_limits import GrammarLimitError, check_gbnf

    try:
        check_gbnf(grammar)
    except GrammarLimitError as error:
        raise OptionError(f"{where}: {error}") from None
    return grammar


def _schema_grammar(text: str, where: str) -> str:
    from specrun.llama.grammar import GrammarError, schema_grammar
    from specrun.llama.grammar_limits import MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH

    if len(text.encode()) > MAX_SCHEMA_BYTES:
        raise OptionError(f"{where} is longer than {MAX_SCHEMA_BYTES} bytes")
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as error:
        raise OptionError(f"{where} is not JSON: {error}") from None
    except RecursionError:  # json's own recursion, far past what a schema may nest
        raise OptionError(f"{where} nests deeper than {MAX_SCHEMA_DEPTH} levels") from None
    try:
        return schema_grammar(schema)
    except GrammarError as error:
        raise OptionError(f"{where}: {error}") from None
