"""`specrun chat`: conversation turns over the engine, and the scriptable piped mode."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from specrun.chat import Conversation
from specrun.core.loop import Prefill, Round
from specrun.core.sampling import SamplingParams
from specrun.engine import Engine
from specrun.errors import SpecrunError
from specrun.options import DraftOptions
from specrun.prompt import Message, render
from tests.support.processes import default_signals, finish, within

ROOT = Path(__file__).resolve().parents[2]
GREEDY = SamplingParams(temperature=0.0, seed=1)
PROMPT_LINE = re.compile(r"^prompt\s+(\d+) tokens \((\d+) evaluated\)", re.MULTILINE)


def load(target: Path, draft: Path) -> Engine:
    return Engine.load(target, draft, params=GREEDY, drafting=DraftOptions(gamma="3"))


def chat_command(target: Path, draft: Path, *options: str) -> list[str]:
    return [
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
        "--gamma",
        "3",
        *options,
    ]


def run_chat(
    target: Path, draft: Path, lines: list[str], *options: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        chat_command(target, draft, *options),
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=ROOT,
        timeout=120,
    )


def greedy(engine: Engine, messages: list[Message], max_tokens: int) -> str:
    tokens = render(engine.target, messages)
    return "".join(
        e.text for e in engine.stream(tokens, max_tokens=max_tokens) if isinstance(e, Round)
    )


def test_piped_chat_answers_each_line_in_order_with_the_conversation_so_far(
    tiny_target, tiny_draft
):
    result = run_chat(
        tiny_target, tiny_draft, ["hello world", "the cat is blue"], "-n", "16", "--stats"
    )
    assert result.returncode == 0, result.stderr

    # The same conversation rendered message by message, without Conversation.
    with load(tiny_target, tiny_draft) as engine:
        first = greedy(engine, [Message("user", "hello world")], 16)
        second = greedy(
            engine,
            [
                Message("user", "hello world"),
                Message("assistant", first),
                Message("user", "the cat is blue"),
            ],
            16,
        )
    assert first and second
    assert result.stdout == f"{first}\n\n{second}\n\n"

    # --stats: one summary per turn; the second evaluates only what the first did not leave in the
    # cache.
    (n1, m1), (n2, m2) = [(int(n), int(m)) for n, m in PROMPT_LINE.findall(result.stderr)]
    assert m1 == n1  # the whole prompt, in one pass that also gives the first token
    assert m2 <= n2 - n1


def test_each_turn_reuses_both_caches(tiny_target, tiny_draft):
    with load(tiny_target, tiny_draft) as engine:
        conversation = Conversation(engine.target, system="Be brief.")
        first = conversation.ask(engine, "hello world", max_tokens=12)
        events = list(first.events)
        first_prompt = events[0].prompt_tokens

        target_before = engine.target.n_evaluated
        draft_before = engine.draft_model.n_evaluated
        second = conversation.ask(engine, "the dog is red", max_tokens=12)
        prefill = next(second.events)
        assert isinstance(prefill, Prefill)
        new_tokens = prefill.prompt_tokens - first_prompt
        assert engine.target.n_evaluated - target_before == prefill.evaluated <= new_tokens
        assert engine.draft_model.n_evaluated - draft_before <= new_tokens
        list(second.events)
        assert [m.role for m in conversation.messages()] == [
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
        ]


def test_a_stopped_answer_is_kept_as_the_reply(tiny_target, tiny_draft):
    with load(tiny_target, tiny_draft) as engine:
        conversation = Conversation(engine.target)
        stop = False
        turn = conversation.ask(engine, "hello world", max_tokens=200, cancelled=lambda: stop)
        rounds = []
        for event in turn.events:
            if isinstance(event, Round):
                rounds.append(event)
                stop = len(rounds) >= 3  # midway: the loop polls between rounds
        assert rounds[-1].finish_reason == "cancelled" and len(rounds) == 4
        assert conversation.turns[-1] == Message("assistant", "".join(r.text for r in rounds))


def test_a_failed_turn_leaves_no_unanswered_question(tiny_target, tiny_draft):
    with load(tiny_target, tiny_draft) as engine:
        conversation = Conversation(engine.target)
        turn = conversation.ask(engine, "hello world", max_tokens=0)
        with pytest.raises(SpecrunError, match="max.tokens"):  # the library names `max_tokens`
            list(turn.events)
        assert conversation.turns == []


def test_dropped_turns_are_reported_on_stderr(tiny_target, tiny_draft):
    lines = ["hello world the cat is blue and the dog is red"] * 4
    result = run_chat(tiny_target, tiny_draft, lines, "-n", "8", "--ctx", "100")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n\n") == 4
    assert "specrun: dropped the 1 oldest exchange to fit the context" in result.stderr


def test_ctrl_c_stops_the_piped_chat_with_130(tiny_target, tiny_draft):
    chat = subprocess.Popen(
        chat_command(tiny_target, tiny_draft, "-n", "8"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        preexec_fn=default_signals,  # stopped with Ctrl-C
    )
    chat.stdin.write("hello world\n")
    chat.stdin.flush()
    # the reply has arrived; the chat waits for the next line
    while within(chat, chat.stdout.readline, "the reply") != "\n":
        pass
    chat.send_signal(signal.SIGINT)
    _, stderr, code = finish(chat)
    assert code == 130
    assert "specrun: interrupted" in stderr


def test_a_closed_stdout_ends_the_chat_quietly(tiny_target, tiny_draft):
    # --threads: with the default, a busy machine adds a warning on stderr.
    chat = subprocess.Popen(
        chat_command(tiny_target, tiny_draft, "-n", "8", "--threads", "1"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    chat.stdin.write("hello world\n")
    chat.stdin.flush()
    within(chat, chat.stdout.readline, "the reply")
    chat.stdout.close()  # as `| head -1` does
    chat.stdin.write("the cat\n")
    chat.stdin.close()
    _, stderr, code = finish(chat)
    assert code == 0
    assert stderr == ""


def test_a_missing_model_is_one_line(tmp_path, tiny_draft):
    result = run_chat(tmp_path / "nowhere.gguf", tiny_draft, ["hello"])
    assert result.returncode == 1
    assert result.stderr.startswith("specrun: error: ") and result.stderr.count("\n") == 1
