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
from specrun_tui.commands import (
    Clear,
    LoadConversation,
    SaveConversation,
    SetGamma,
    SetSampling,
    SetSystem,
    SwitchDraft,
)
from specrun_tui.messages import (
    Ask,
    AskAgain,
    Command,
    ConversationLoaded,
    DraftSwitched,
    EndAnswer,
    Ended,
    Finished,
    Loaded,
    LoadFailed,
    Refused,
    Reply,
    Said,
    Started,
)

if TYPE_CHECKING:
    from specrun.chat import Conversation
    from specrun.context_overflow import Overflow
    from specrun.conversation_file import ConversationFile
    from specrun.engine import Engine

STOP_WAIT_SECONDS = 5.0  # for the engine to end its round, save auto's state and close

# `/draft SPEC`: the draft SPEC names (as `--draft` does) resolved, and the loader of the
# engine with it; a SpecrunError where SPEC names no draft. It runs in the engine process.
DraftLoader = Callable[[str], Callable[[], "Engine"]]


def engine_summary(engine: Engine) -> str:
    """Target, draft, device and GPU layers, for the bar at the top."""
    where = engine.placement()
    device, layers = where.device, " + ".join(where.gpu_layers)
    return (
        f"target {engine.target.name}  ·  draft {draft_name(engine)}  ·  {device}  ·  "
        f"GPU layers {layers}"
    )


def draft_name(engine: Engine) -> str:
    return engine.draft.name if engine.draft else "none"


def loaded_reply(engine: Engine, resumed: ConversationLoaded | None = None) -> Loaded:
    return Loaded(
        engine_summary(engine),
        draft_name(engine),
        engine.policy.name,
        engine.params,
        engine.gamma_max,
        resumed,
    )


def conversation_reply(conversation: Conversation, note: str) -> ConversationLoaded:
    return ConversationLoaded(conversation.system, tuple(conversation.turns), note)


def exchanges(conversation: Conversation) -> str:
    count = len(conversation.turns) // 2
    return f"{count} exchange{'' if count == 1 else 's'}"


class EngineProcess:
    """The TUI's end: start the engine process, send it commands, read what it sent.

    `load` runs in the new process, so it must pickle: a module-level function, or a
    functools.partial of one; so must `load_draft`, which `/draft` needs (without it,
    `/draft` is refused). The conversation starts as `resume` saved it, if given, and
    `overflow` says what it does once longer than the context. Settings are checked here,
    against the loaded engine's (`loaded`), so a bad one is refused at once, and only good
    ones are sent. Use as a context manager, or call `close`.
    """

    def __init__(
        self,
        load: Callable[[], Engine],
        *,
        load_draft: DraftLoader | None = None,
        resume: ConversationFile | None = None,
        overflow: Overflow = "truncate",
    ) -> None:
        # spawn, not fork: a forked child of a process that ran OpenMP (a test session)
        # or has threads (Textual) may hang.
        context = multiprocessing.get_context("spawn")
        self._connection, child_end = context.Pipe()
        self._process = context.Process(
            target=serve,
            args=(load, load_draft, resume, overflow, child_end, os.getpid()),
            name="specrun-engine",
            daemon=True,
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
    def draft(self) -> str:
        assert self.loaded is not None
        return self.loaded.draft

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
            elif isinstance(reply, DraftSwitched):
                self.loaded = reply.loaded
        return replies

    def close(self) -> None:
        """Close the pipe, which stops the engine after its round; kill it if it does not end."""
        self._connection.close()
        self._process.join(STOP_WAIT_SECONDS)
        if self._process.is_alive():  # still loading, or in one long native call
            self._process.kill()
            self._process.join()


# --- the engine's end --------------------------------------------------------------------


def serve(
    load: Callable[[], Engine],
    load_draft: DraftLoader | None,
    resume: ConversationFile | None,
    overflow: Overflow,
    connection: Connection,
    parent: int,
) -> None:
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
    session = _Session(engine, connection, load, load_draft, overflow)
    try:
        resumed = None
        if resume is not None:
            from specrun.conversation_file import resume as resume_conversation

            resume_conversation(session.conversation, resume)
            resumed = conversation_reply(
                session.conversation, f"resumed {exchanges(session.conversation)}"
            )
        connection.send(loaded_reply(engine, resumed))
        session.run()
    finally:
        if not session.engine_closed:
            session.engine.close()


def _quiet_terminal() -> None:
    """Nothing the engine process or llama.cpp writes may reach the TUI's screen."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


class _Session:
    def __init__(
        self,
        engine: Engine,
        connection: Connection,
        load: Callable[[], Engine],
        load_draft: DraftLoader | None,
        overflow: Overflow,
    ) -> None:
        from specrun.chat import Conversation

        self.engine = engine
        self.connection = connection
        self.load = load  # the engine as it is now, loaded again: where a new draft fails
        self.load_draft = load_draft
        self.conversation = Conversation(engine.target, overflow=overflow)
        self.stop = False  # EndAnswer arrived, or the pipe closed, during this answer
        self.closed = False
        self.engine_closed = False  # a new draft failed, and the old one with it

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
        elif isinstance(command, AskAgain):
            self.answer_again(command)
        elif isinstance(command, SwitchDraft):
            self.switch_draft(command.spec)
        elif isinstance(command, SaveConversation):
            self.save(command.path)
        elif isinstance(command, LoadConversation):
            self.load_conversation(command.path)
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

    def answer_again(self, again: AskAgain) -> None:
        turns = self.conversation.turns
        if len(turns) < 2 or turns[-1].role != "assistant":
            self.send(Refused("/retry: no answer to retry yet"))
            return
        question = turns[-2].content
        del turns[-2:]
        self.answer(Ask(question, again.max_tokens))

    def save(self, path: str) -> None:
        from specrun.conversation_file import save_conversation

        try:
            written = save_conversation(self.conversation, path)
        except SpecrunError as error:
            self.send(Said(f"/save: {error}", error=True))
            return
        self.send(Said(f"saved {exchanges(self.conversation)} to {written}"))

    def load_conversation(self, path: str) -> None:
        """The conversation a file saved, in place of this one (its system prompt too, where
        it has one); the next answer renders it whole."""
        from specrun.conversation_file import load_conversation, resume

        try:
            saved = load_conversation(path)
        except SpecrunError as error:
            self.send(Said(f"/load: {error}", error=True))
            return
        resume(self.conversation, saved)
        self.send(
            conversation_reply(
                self.conversation, f"loaded {exchanges(self.conversation)} from {path}"
            )
        )

    def switch_draft(self, spec: str) -> None:
        """Load the target again with the draft `spec` names; where that fails, as it was.

        The old engine closes first: two targets at once may not fit the memory (and the
        layers are placed by free memory). The conversation and the sampling settings stay;
        so does the γ policy, where it suits the new draft.
        """
        if self.load_draft is None:
            self.send(DraftSwitched(loaded_reply(self.engine), "this chat cannot switch drafts"))
            return
        try:
            load = self.load_draft(spec)  # resolved first: a name of nothing costs no reload
        except SpecrunError as error:
            self.send(DraftSwitched(loaded_reply(self.engine), str(error)))
            return
        params, gamma, old_draft = (
            self.engine.params,
            self.engine.gamma_spec,
            draft_name(self.engine),
        )
        self.engine.close()
        refusal = None
        try:
            self.engine, self.load = load(), load
        except SpecrunError as error:
            refusal = f"{error}; the draft stays {old_draft}"
            try:
                self.engine = self.load()
            except SpecrunError as again:  # nothing left to answer with: the process ends
                self.send(
                    Said(f"/draft {spec}: {error}; loading {old_draft} again: {again}", error=True)
                )
                self.engine_closed = self.closed = True
                return
        self.engine.params = params
        try:
            self.engine.set_gamma(gamma)
        except SpecrunError:  # a fixed γ beyond the new draft's most: its default instead
            pass
        self.conversation.model = self.engine.target
        self.send(DraftSwitched(loaded_reply(self.engine), refusal))

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
