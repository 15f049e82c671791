"""The engine in a process of its own, so that it never waits for the TUI.

In one process, the thread that drives llama.cpp needs the GIL between every native
call, and the Textual thread holds it for each repaint: on a machine with few cores the
answer came a third slower than `specrun run`, and `auto` learned the waits as costs.
Here the engine process loads the models, keeps the conversation and runs the round
loop as `specrun run` does, sending each event the engine yields down a pipe; the TUI
process reads the pipe at its own pace. Commands (ask, stop, the slash commands) go
the other way and are taken between rounds, where the loop polls `cancelled`.

The engine process ignores the stop signals a terminal sends its whole process group:
the TUI decides, and the engine stops when its pipe closes (the TUI quit or died). A
TUI killed outright takes the engine with it at once (specrun.system.lifeline): while
loading, or waiting on an RPC server, the engine would not look at its pipe for long.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from specrun.core.gamma import parse_policy
from specrun.core.sampling import SamplingParams
from specrun.errors import SpecrunError
from specrun.llama.supervise import crash_hint, died_of
from specrun.system import interrupts
from specrun.system.lifeline import die_with_parent
from specrun_tui.commands import Clear, SetGamma, SetSampling, SetSystem
from specrun_tui.messages import (
    Ask,
    Command,
    EndAnswer,
    Ended,
    Finished,
    Loaded,
    LoadFailed,
    Refused,
    Reply,
    Started,
)

if TYPE_CHECKING:
    from specrun.engine import Engine

STOP_WAIT_SECONDS = 5.0  # for the engine to end its round, save auto's state and close


def engine_summary(engine: Engine) -> str:
    """Target, draft, device and GPU layers, for the bar at the top."""
    where = engine.placement()
    device, layers = where.device, " + ".join(where.gpu_layers)
    draft_name = engine.draft.name if engine.draft else "none"
    return (
        f"target {engine.target.name}  ·  draft {draft_name}  ·  {device}  ·  GPU layers {layers}"
    )


class EngineProcess:
    """The TUI's end: start the engine process, send it commands, read what it sent.

    `load` runs in the new process, so it must pickle: a module-level function, or a
    functools.partial of one. Settings are checked here, against the loaded engine's
    (`loaded`), so a bad one is refused at once, and only good ones are sent.
    Use as a context manager, or call `close`.
    """

    def __init__(self, load: Callable[[], Engine]) -> None:
        # spawn, not fork: a forked child of a process that ran OpenMP (a test session)
        # or has threads (Textual) may hang.
        context = multiprocessing.get_context("spawn")
        self._connection, child_end = context.Pipe()
        self._process = context.Process(
            target=serve, args=(load, child_end, os.getpid()), name="specrun-engine", daemon=True
        )
        self._process.start()
        child_end.close()
        self.loaded: Loaded | None = None
        self.ended: str | None = None

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def policy(self) -> str:
        assert self.loaded is not None
        return self.loaded.policy

    @property
    def params(self) -> SamplingParams:
        assert self.loaded is not None
        return self.loaded.params

    def send(self, command: Command) -> None:
        """Send a command; a setting is checked first (a SpecrunError says what is wrong)."""
        if self.ended is not None:
            raise SpecrunError(self.ended)
        if isinstance(command, SetGamma):
            assert self.loaded is not None
            command = SetGamma(parse_policy(command.spec, self.loaded.gamma_max).name)
            self.loaded = replace(self.loaded, policy=command.spec)
        elif isinstance(command, SetSampling):
            assert self.loaded is not None
            self.loaded = replace(self.loaded, params=replace(self.params, **command.change))
        try:
            self._connection.send(command)
        except OSError:  # the engine process is gone; `receive` says why
            pass

    def receive(self) -> list[Reply]:
        """What the engine sent since the last call; never waits."""
        replies: list[Reply] = []
        try:
            while self.ended is None and self._connection.poll():
                replies.append(self._connection.recv())
                if isinstance(
                    replies[-1], LoadFailed
                ):  # its reason, not the exit that follows, is the end
                    self.ended = replies[-1].error
        except (EOFError, OSError):
            self._process.join(STOP_WAIT_SECONDS)
            code = self._process.exitcode
            signum = None if code is None else died_of(code)
            self.ended = (
                crash_hint(signum)
                if signum is not None
                else f"the engine process ended (exit status {code})"
            )
            replies.append(Ended(self.ended))
        for reply in replies:
            if isinstance(reply, Loaded):
                self.loaded = reply
        return replies

    def close(self) -> None:
        """Close the pipe, which stops the engine after its round; kill it if it does not end."""
        self._connection.close()
        self._process.join(STOP_WAIT_SECONDS)
        if self._process.is_alive():  # still loading, or in one long native call
            self._process.kill()
            self._process.join()


# --- the engine's end --------------------------------------------------------------------


def serve(load: Callable[[], Engine], connection: Connection, parent: int) -> None:
    """The engine process: load, then carry out commands until the pipe closes."""
    die_with_parent(parent)
    for signum in interrupts.STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    _quiet_terminal()
    try:
        engine = load()
    except SpecrunError as error:
        connection.send(LoadFailed(str(error)))
        return
    with engine:
        connection.send(
            Loaded(engine_summary(engine), engine.policy.name, engine.params, engine.gamma_max)
        )
        _Session(engine, connection).run()


def _quiet_terminal() -> None:
    """Nothing the engine process or llama.cpp writes may reach the TUI's screen."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


class _Session:
    def __init__(self, engine: Engine, connection: Connection) -> None:
        from specrun.chat import Conversation

        self.engine = engine
        self.connection = connection
        self.conversation = Conversation(engine.target)
        self.stop = False  # EndAnswer arrived, or the pipe closed, during this answer
        self.closed = False

    def run(self) -> None:
        while not self.closed:
            try:
                command = self.connection.recv()
            except (EOFError, OSError):
                return
            self.carry_out(command)

    def carry_out(self, command: Command) -> None:
        if isinstance(command, Ask):
            self.answer(command)
        elif isinstance(command, EndAnswer):
            self.stop = True
        elif isinstance(command, Clear):
            self.conversation.clear()
        elif isinstance(command, SetSystem):
            self.conversation.system = command.text
        elif isinstance(command, SetSampling):
            self.engine.set_params(**command.change)
        elif isinstance(command, SetGamma):
            self.engine.set_gamma(command.spec)

    def cancelled(self) -> bool:
        """Polled by the loop once a round: take the commands that came meanwhile."""
        try:
            while self.connection.poll():
                self.carry_out(self.connection.recv())
        except (EOFError, OSError):
            self.stop = self.closed = True
        return self.stop

    def answer(self, ask: Ask) -> None:
        self.stop = False
        try:
            turn = self.conversation.ask(
                self.engine, ask.text, max_tokens=ask.max_tokens, cancelled=self.cancelled
            )
        except SpecrunError as refusal:
            self.send(Refused(str(refusal)))
            return
        self.send(Started(turn.dropped_notice if turn.dropped else None))
        error = None
        try:
            for event in turn.events:
                self.send(event)
        except SpecrunError as failure:
            error = str(failure)
        self.send(Finished(error))

    def send(self, reply: Reply) -> None:
        """Send, unless the TUI has gone; then the loop stops at its next poll."""
        if self.closed:
            return
        try:
            self.connection.send(reply)
        except OSError:
            self.stop = self.closed = True
