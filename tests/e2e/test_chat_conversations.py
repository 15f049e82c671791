"""`specrun chat` piped: a conversation saved after each answer (--save) and resumed
(--resume), and --context-overflow's refusal."""

from __future__ import annotations

import json

from tests.e2e.test_chat import PROMPT_LINE, run_chat


def test_a_piped_chat_is_saved_and_resumed(tiny_target, tiny_draft, tmp_path):
    path = tmp_path / "chat.json"
    first = run_chat(tiny_target, tiny_draft, ["hello world"], "-n", "6", "--save", str(path))
    assert first.returncode == 0, first.stderr
    assert [m["role"] for m in json.loads(path.read_text())["messages"]] == ["user", "assistant"]

    again = run_chat(
        tiny_target, tiny_draft, ["the dog is red"], "-n", "6", "--resume", str(path), "--stats"
    )
    assert again.returncode == 0, again.stderr
    saved = json.loads(path.read_text())["messages"]  # saved back to the file it resumed
    assert [m["content"] for m in saved[::2]] == ["hello world", "the dog is red"]
    fresh = run_chat(tiny_target, tiny_draft, ["the dog is red"], "-n", "6", "--stats")
    (resumed_prompt, _), (fresh_prompt, _) = (
        PROMPT_LINE.findall(result.stderr)[0] for result in (again, fresh)
    )
    assert int(resumed_prompt) > int(fresh_prompt)  # the earlier exchange is in the prompt


def test_a_bad_conversation_file_is_one_line_before_loading(tiny_target, tiny_draft, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"format": "specrun.conversation", "version": 1}')
    result = run_chat(tiny_target, tiny_draft, ["hello"], "--resume", str(path))
    assert result.returncode != 0
    assert f"{path} is not a conversation file: messages: Field required" in result.stderr


def test_context_overflow_error_refuses_a_conversation_too_long(tiny_target, tiny_draft):
    lines = ["hello world the cat is blue and the dog is red"] * 4
    result = run_chat(
        tiny_target, tiny_draft, lines, "-n", "8", "--ctx", "100", "--context-overflow", "error"
    )
    assert result.returncode != 0
    assert "the conversation is" in result.stderr and "dropped" not in result.stderr
    assert result.stdout.count("\n\n") == 3  # the answers before it
