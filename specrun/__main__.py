"""The `specrun` command (and `python -m specrun`): the signal policy from its first moment.

The policy (specrun.system.interrupts) is installed before anything heavy is imported,
so a Ctrl-C, SIGTERM or SIGHUP that lands while Python loads llama.cpp, numpy and Typer
ends the command as one during the work would: the `interrupted` line and 128 + the
signal, not a traceback. Then the supervisor starts its child (specrun.llama.supervise:
a fork, or the command again where there is none), and the child imports the command
line and runs it.
"""

from __future__ import annotations

import sys


def entry() -> None:
    from specrun.system import interrupts

    interrupts.install()
    try:
        from specrun.llama.supervise import supervise

        status = supervise(_command_line)
    except KeyboardInterrupt as stop:  # before the command line could take it: imports, the fork
        status = interrupts.interrupted(stop)
    sys.exit(status)


def _command_line() -> int:
    from specrun.cli.app import main
    from specrun.system import interrupts

    status = main()
    interrupts.exiting()
    return status


if __name__ == "__main__":
    entry()
