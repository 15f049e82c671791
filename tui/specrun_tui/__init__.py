"""The Textual front end of specrun: a chat that streams the engine's events.

Not imported by `import specrun`; `specrun chat` opens it on a terminal.
"""

from specrun_tui.app import SpecrunApp

__all__ = ["SpecrunApp"]
