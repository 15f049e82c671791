"""Long conversations in `chat`: the overflow policy (specrun.context_overflow) and the
conversation file (specrun.conversation_file)."""

from __future__ import annotations

import json
from functools import partial

import pytest

from specrun.chat import Conversation
from specrun.context_overflow import ContextOverflow, fit
from specrun.conversation_file import (
    ConversationFileError,
    load_conversation,
    resume,
    save_conversation,
)
from specrun.core.loop import Round
from specrun.engine import Engine
from specrun.llama.model import Model
from specrun.options import DraftOptions, LoadOptions
from specrun.prompt import Message, render
from tests.support.identity import GREEDY, assert_greedy_identical, greedy_tokens

LINE = "hello world the cat is blue and the dog is red"


@pytest.fixture(scope="module")
def engine(tiny_target, tiny_draft):
    with Engine.load(
        tiny_target,
        tiny_draft,
        options=LoadOptions(n_ctx=128, threads=1),
        params=GREEDY,
        drafting=DraftOptions(gamma="3"),
    ) as loaded:
        yield loaded


def test_truncate_drops_whole_exchanges_and_keeps_the_system_messages(engine):
    messages = [
        Message("system", "be brief"),
        Message("user", "one " * 10),
        Message("assistant", "two " * 10),
        Message("tool", "three " * 10),
        Message("system", "and kind"),
        Message("user", "four"),
    ]
    whole = len(render(engine.target, messages))
    kept, tokens, dropped = fit(messages, partial(render, engine.target), whole - 1, "truncate")
    assert dropped == 1
    assert [m.content for m in kept] == ["be brief", "and kind", "four"]
    assert tokens == render(engine.target, kept)
    with pytest.raises(ContextOverflow, match="the last message is"):
        fit(messages, partial(render, engine.target), 3, "truncate")
    with pytest.raises(ContextOverflow, match="the conversation is"):
        fit(messages, partial(render, engine.target), whole - 1, "error")


def test_an_answer_after_a_truncation_is_plain_decoding_of_the_truncated_prompt(
    engine, tiny_target
):
    conversation = Conversation(engine.target, system="Be brief.")
    for _ in range(6):
        turn = conversation.ask(engine, LINE, max_tokens=12)
        answer = [t for e in turn.events if isinstance(e, Round) for t in e.tokens]
    assert conversation.dropped_turns > 0
    assert conversation.turns[0].role == "user"  # what is left still alternates
    prompt = render(engine.target, conversation.messages()[:-1])  # the last answer's prompt
    with Model(tiny_target, n_ctx=128) as alone:
        plain, _ = greedy_tokens(alone, prompt, max_tokens=12)
        assert assert_greedy_identical(alone, prompt, plain, answer, 1e-3) == "identical"


def test_the_error_policy_refuses_and_keeps_the_conversation(engine):
    conversation = Conversation(engine.target, overflow="error")
    turns = 0
    with pytest.raises(ContextOverflow, match="the conversation is .* tokens"):
        for turns in range(1, 20):  # noqa: B007 - the turns it took
            list(conversation.ask(engine, LINE, max_tokens=12).events)
    assert len(conversation.turns) == 2 * (turns - 1)  # the refused question is not kept


def test_a_conversation_saved_is_resumed_whole(engine, tmp_path):
    conversation = Conversation(engine.target, system="Be brief.")
    list(conversation.ask(engine, "hello world", max_tokens=6).events)
    conversation.turns.append(Message("user", "a question being answered"))
    path = save_conversation(conversation, tmp_path / "chat.json")
    body = json.loads(path.read_text(encoding="utf-8"))
    assert body["format"] == "specrun.conversation" and body["version"] == 1
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]  # no question left open
    again = Conversation(engine.target)
    resume(again, load_conversation(path))
    assert again.messages() == conversation.messages()[:-1]
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("{", "is not JSON: Expecting property name"),
        ('{"format": "specrun.conversation", "version": 2, "messages": []}', "of version 2"),
        ('{"version": 1, "messages": []}', "not a conversation file: format: Field required"),
        (
            '{"format": "specrun.conversation", "version": 1, '
            '"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}',
            "messages[1].role is user: the messages alternate",
        ),
        (
            '{"format": "specrun.conversation", "version": 1, "messages": [], "extra": 1}',
            "extra: Extra inputs are not permitted",
        ),
        (
            '{"format": "specrun.conversation", "version": 1, "messages": [{"role": "user"}]}',
            "messages.0.content: Field required",
        ),
    ],
)
def test_a_bad_file_is_one_line_naming_it_and_the_field(tmp_path, content, error):
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConversationFileError) as raised:
        load_conversation(path)
    assert str(raised.value).startswith(str(path)) and error in str(raised.value)
    assert "\n" not in str(raised.value)
    with pytest.raises(ConversationFileError, match="cannot read .*missing.json"):
        load_conversation(tmp_path / "missing.json")
