"""The one exception type the front ends turn into a one-line error."""

import sys
from collections.abc import Callable


class SpecrunError(Exception):
    """A problem the user can fix: shown as `specrun: error: <message>`, exit `exit_code`."""

    exit_code = 1


class OptionError(SpecrunError):
    """A bad option value: a usage error, exit 2 like click's own. The library names an
    option in backquotes (`n_ctx`); the command line shows its flag there instead."""

    exit_code = 2


class Interrupted(SpecrunError):
    """A stop signal during work that leaves nothing half-done behind (a download, say);
    the exit status is 128 + the signal, as for any stopped command."""

    def __init__(self, message: str, exit_code: int = 130) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def report(error: SpecrunError, words: Callable[[str], str] = str) -> int:
    """Print the one-line error on stderr, in a front end's `words`; return the exit status."""
    print(f"specrun: error: {words(str(error))}", file=sys.stderr)
    return error.exit_code
