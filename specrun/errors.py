"""The one exception type the front ends turn into a one-line error."""


class SpecrunError(Exception):
    """A problem the user can fix: shown as `specrun: error: <message>`, exit 1."""
