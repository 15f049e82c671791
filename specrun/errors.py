"""The one exception type the front ends turn into a one-line error."""

import sys


class SpecrunError(Exception):
    """A problem the user can fix: shown as `specrun: error: <message>`, exit `exit_code`."""

    exit_code = 1


class OptionError(SpecrunError):
    """A bad value on the command line: a usage error, exit 2 like click's own."""

    exit_code = 2


class Interrupted(SpecrunError):
    """Ctrl-C during work that leaves nothing half-done behind (a download, say)."""

    exit_code = 130


def report(error: SpecrunError) -> int:
    """Print the one-line error on stderr; return the exit status."""
    print(f"specrun: error: {error}", file=sys.stderr)
    return error.exit_code
