"""The answer's constraint as the command line gives it: `--grammar FILE` or `--json-schema
FILE`, read and checked against the grammar limits before the models load."""

from __future__ import annotations

import json
from pathlib import Path

from specrun.errors import OptionError


def grammar_of(grammar_file: Path | None, schema_file: Path | None) -> str | None:
    """The GBNF text of --grammar, or of the JSON schema in --json-schema (checked now, before
    the models load); not both."""
    from specrun.llama.grammar import GrammarError, schema_grammar
    from specrun.llama.grammar_limits import (
        MAX_GRAMMAR_BYTES,
        MAX_SCHEMA_BYTES,
        MAX_SCHEMA_DEPTH,
        GrammarLimitError,
        check_gbnf,
    )
    from specrun.system.textio import read_text

    if grammar_file is not None and schema_file is not None:
        raise OptionError("--grammar and --json-schema each constrain the answer: give one")
    if grammar_file is not None:
        grammar = read_text(grammar_file, "grammar", error=OptionError, limit=MAX_GRAMMAR_BYTES)
        try:
            check_gbnf(grammar)
        except GrammarLimitError as error:
            raise OptionError(f"--grammar {grammar_file}: {error}") from None
        return grammar
    if schema_file is None:
        return None
    text = read_text(schema_file, "JSON schema", error=OptionError, limit=MAX_SCHEMA_BYTES)
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as error:
        raise OptionError(f"--json-schema {schema_file} is not JSON: {error}") from None
    except RecursionError:  # json's own recursion, far past what a schema may nest
        raise OptionError(
            f"--json-schema {schema_file} nests deeper than {MAX_SCHEMA_DEPTH} levels"
        ) from None
    try:
        return schema_grammar(schema)
    except GrammarError as error:
        raise OptionError(f"--json-schema {schema_file}: {error}") from None
