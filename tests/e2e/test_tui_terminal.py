"""`specrun chat` as a person meets it: in a pseudo-terminal, keys typed, the screen read.

The command runs as installed (`python -m specrun`, supervisor and all); stdin and
stdout are the pty, so it opens the TUI on its own. tests/terminal.py is the terminal.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

from specrun.engine import Engine
from specrun.prompt import Message, render
from tests.support.terminal import Terminal

PROMPT_BOX = "Message, or /help"


def chat(target: Path, draft: Path, *options: str) -> Terminal:
    env = {
        name: value for name, value in os.environ.items() if name not in ("COLUMNS", "LINES")
    }  # the pty's size
    env["TERM"] = "xterm-256color"
    return Terminal(
        [
            sys.executable,
            "-m",
            "specrun",
            "chat",
            "-t",
            str(target),
            "-d",
            str(draft),
            "--temp",
            "0",
            *options,
        ],
        size=(120, 40),
        env=env,
    )


def say(terminal: Terminal, line: str) -> None:
    terminal.type(line)
    terminal.press("enter")


def test_on_a_terminal_chat_opens_the_tui_and_ctrl_q_quits_with_0(tiny_target, tiny_draft):
    with chat(tiny_target, tiny_draft) as terminal:
        parts = ["target target.gguf", "draft draft.gguf", "tok/s answer", PROMPT_BOX, "^q Quit"]
        terminal.wait_for(lambda screen: all(part in screen for part in parts))
        terminal.press("ctrl+q")
        assert terminal.wait_exit() == 0


PASTE = "Fix the typo in this list:\n- apples\n- bananna\n- cherries"


def test_a_pasted_text_is_answered_whole(tiny_target, tiny_draft):
    """A paste in bracketed paste mode, its line breaks as carriage returns: the whole text
    is one message (a box of one line kept the first line and dropped the rest)."""
    with chat(tiny_target, tiny_draft, "-n", "8") as terminal:
        terminal.wait_for(PROMPT_BOX)
        terminal.paste(PASTE)
        terminal.wait_for("- cherries")  # in the box, not sent: Enter sends
        assert "tok/s ·" not in terminal.text()
        terminal.press("enter")
        screen = terminal.wait_for(re.compile(r"8 tokens · [\d.]+ tok/s · TTFT").search)
        assert PROMPT_BOX in screen  # the box is empty again
        shown = [line.split("│")[0].rstrip() for line in screen.splitlines()]
        at = shown.index(" ▌ Fix the typo in this list:")
        assert shown[at + 1 : at + 4] == [" ▌ - apples", " ▌ - bananna", " ▌ - cherries"]
        # The engine had all of it: the prompt is the whole text's, token for token.
        say(terminal, "/stats")
        prompt = int(re.search(r"prompt\s+(\d+) tokens", terminal.wait_for("mean gamma"))[1])
        assert prompt == prompt_tokens(tiny_target, PASTE)

        # Shift+Enter (kitty's keyboard protocol, which Textual asks for) and Ctrl+J (a line
        # feed, in any terminal) start new lines; Enter sends the three.
        terminal.type("one")
        terminal.press("shift+enter")
        terminal.type("two")
        terminal.press("ctrl+j")
        terminal.type("three")
        terminal.wait_for(re.compile(r"^ *one *$\n^ *two *$\n^ *three *$", re.M).search)
        terminal.press("enter")
        screen = terminal.wait_for(re.compile(r"▌ one\s*│?\n ▌ two\s*│?\n ▌ three").search)
        terminal.press("ctrl+q")
        assert terminal.wait_exit() == 0


def test_draft_switches_the_draft_as_draft_names_it(tiny_target, tiny_draft):
    with chat(tiny_target, tiny_draft, "-n", "8") as terminal:
        terminal.wait_for(PROMPT_BOX)
        say(terminal, "/draft lookup")
        screen = terminal.wait_for("draft lookup, γ policy")
        assert "target target.gguf  ·  draft lookup  ·" in screen
        say(terminal, "hello")
        terminal.wait_for(re.compile(r"8 tokens · [\d.]+ tok/s · TTFT .* · draft lookup ·").search)
        say(terminal, "/draft nowhere.gguf")
        screen = terminal.wait_for(re.compile(r"/draft: .*nowhere\.gguf").search)
        assert "target target.gguf  ·  draft lookup  ·" in screen  # the draft stays
        terminal.press("ctrl+q")
        assert terminal.wait_exit() == 0


def test_a_saved_chat_resumes(tiny_target, tiny_draft, tmp_path):
    saved = tmp_path / "chat.json"
    with chat(tiny_target, tiny_draft, "-n", "8") as terminal:
        terminal.wait_for(PROMPT_BOX)
        say(terminal, "hello there")
        terminal.wait_for(re.compile(r"\d+ tokens · ").search)
        say(terminal, f"/save {saved}")
        terminal.wait_for("saved 1 exchange to")
        terminal.press("ctrl+q")
        assert terminal.wait_exit() == 0
    with chat(tiny_target, tiny_draft, "-n", "8", "--resume", str(saved)) as terminal:
        screen = terminal.wait_for("resumed 1 exchange")
        assert "▌ hello there" in screen
        say(terminal, "/retry")  # the resumed answer, made again
        terminal.wait_for(re.compile(r"\d+ tokens · ").search)
        terminal.press("ctrl+q")
        assert terminal.wait_exit() == 0


def prompt_tokens(target: Path, text: str) -> int:
    with Engine.load(target) as engine:
        return len(render(engine.target, [Message("user", text)]))


def test_set_gamma_3_takes_effect(tiny_target, tiny_draft):
    with chat(tiny_target, tiny_draft, "-n", "24") as terminal:
        terminal.wait_for(PROMPT_BOX)
        say(terminal, "/set gamma 3")
        terminal.wait_for("(fixed:3)")
        say(terminal, "hello world")
        terminal.wait_for("stopped at the token limit")
        say(terminal, "/stats")
        screen = terminal.wait_for("mean gamma")
        assert re.search(
            r"γ\s+3 \(fixed:3\)", screen
        )  # the panel: the last round's γ and the policy
        drafted = int(re.search(r"drafted\s+(\d+)", screen)[1])
        mean_gamma = float(re.search(r"mean gamma\s+([\d.]+)", screen)[1])
        assert drafted > 0 and mean_gamma >= 2  # 3, but less where the token limit leaves less room
        terminal.press("ctrl+q")
        assert terminal.wait_exit() == 0


def test_escape_stops_a_long_answer(demo_pair):
    # The demo pair, not the tiny models: those finish 900 tokens before a key arrives.
    target, draft = demo_pair
    with chat(target, draft, "-n", "900") as terminal:
        start_a_long_answer(terminal)
        terminal.press("escape")
        terminal.wait_for(re.compile(r"^\s*stopped\s*(│|$)", re.M).search, timeout=60)
        say(terminal, "/stats")
        screen = terminal.wait_for("mean gamma")
        assert 0 < int(re.search(r"generated\s+(\d+) tokens", screen)[1]) < 900
        terminal.press("ctrl+q")
        assert terminal.wait_exit() == 0


def start_a_long_answer(terminal: Terminal) -> None:
    terminal.wait_for(PROMPT_BOX, timeout=60)
    say(
        terminal,
        "Write a Python function that checks whether a number is prime. Include a docstring.",
    )
    terminal.wait_for(re.compile(r"tok/s now\s+\d").search, timeout=60)  # the answer is under way


def gone_within(terminal: Terminal, seconds: float) -> bool:
    """Whether the command and every process it started ended within `seconds`."""
    deadline = time.monotonic() + seconds
    while terminal.session() and time.monotonic() < deadline:
        time.sleep(0.1)
    return not terminal.session()


def test_a_closed_terminal_ends_the_chat_mid_answer(demo_pair):
    # As a closed window or a dropped ssh connection: nobody is left to press a key.
    target, draft = demo_pair
    with chat(target, draft, "-n", "2000") as terminal:
        start_a_long_answer(terminal)
        terminal.hang_up()
        assert gone_within(terminal, 15), terminal.session()  # was: kept running at 40-60% CPU
        assert terminal.process.wait(timeout=60) == 128 + signal.SIGHUP


def test_sigterm_ends_the_chat_mid_answer(demo_pair):
    target, draft = demo_pair
    with chat(target, draft, "-n", "2000") as terminal:
        start_a_long_answer(terminal)
        terminal.process.send_signal(signal.SIGTERM)  # to `specrun` alone, as `kill` does
        assert gone_within(terminal, 15), terminal.session()
        assert terminal.process.wait(timeout=60) == 128 + signal.SIGTERM
