"""The answer's constraint as the command line gives it: `--grammar FILE` or `--json-schema
FILE`, read and checked before the models load."""

from __future__ import annotations

import json
from pathlib import Path

from specrun.errors import OptionError


def grammar_of(grammar_file: Path | None, schema_file: Path | None) -> str | None:
    """The GBNF text of --grammar, or of the JSON schema in --json-schema (checked now, before
    the models load); not both."""
    from specrun.llama.grammar import schema_grammar
    from specrun.system.textio import read_text

    if grammar_file is not None and schema_file is not None:
        raise OptionError("--grammar and --json-schema each constrain the answer: give one")
    if grammar_file is not None:
        return read_text(grammar_file, "grammar", error=OptionError)
    if schema_file is None:
        return None
    try:
        schema = json.loads(read_text(schema_file, "JSON schema", error=OptionError))
    except json.JSONDecodeError as error:
        raise OptionError(f"--json-schema {schema_file} is not JSON: {error}") from None
    return schema_grammar(schema)
