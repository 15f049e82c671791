"""The server's checks before any handler runs, as pure functions: a body's bytes into JSON a
handler can use."""

from __future__ import annotations

import pytest

from specrun.server.requests import MAX_DEPTH, ApiError, parse_body


def refusal(action, *args: object) -> ApiError:
    with pytest.raises(ApiError) as refused:
        action(*args)
    return refused.value


# --- the body -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, param",
    [
        (rb'{"prompt": "\ud800"}', "prompt"),
        (rb'{"prompt": "ok \udfff then"}', "prompt"),
        (rb'{"messages": [{"role": "user", "content": "\udc00"}]}', "messages[0].content"),
        (
            rb'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\ud83d"}]}]}',
            "messages[0].content[0].text",
        ),
        (rb'{"stop": ["a", "\ud800"]}', "stop[1]"),
        (rb'{"\ud800": 1}', None),
        (rb'{"metadata": {"\udc00x": 1}}', "metadata"),
    ],
)
def test_a_lone_surrogate_anywhere_is_refused_where_it_is(body: bytes, param: str | None):
    error = refusal(parse_body, body)
    assert (error.status, error.param, error.code) == (400, param, "invalid_value")
    assert "lone surrogate" in str(error)


def test_a_surrogate_pair_is_one_character_and_welcome():
    assert parse_body(rb'{"prompt": "\ud83d\ude00"}') == {"prompt": "\U0001f600"}


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"])
@pytest.mark.parametrize("field", ["temperature", "top_p", "min_p", "max_tokens", "seed"])
def test_every_non_finite_number_is_refused_the_same_way(field: str, text: str):
    error = refusal(parse_body, b'{"%s": %s}' % (field.encode(), text.encode()))
    assert (error.status, error.param, error.code) == (400, field, "invalid_value")
    shown = {"1e400": "Infinity", "-1e400": "-Infinity"}.get(text, text)
    assert str(error) == f"`{field}` must be a finite number, got {shown}"


def test_a_non_finite_number_deep_inside_is_named_by_its_path():
    error = refusal(parse_body, b'{"logit_bias": {"42": -Infinity}}')
    assert error.param == "logit_bias.42"


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
def test_nesting_beyond_the_limit_is_refused(depth: int):
    body = b'{"x": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"
    error = refusal(parse_body, body)
    assert error.status == 400 and str(error) == f"the body nests deeper than {MAX_DEPTH} levels"


def test_nesting_up_to_the_limit_is_accepted():
    body = b'{"x": ' + b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1) + b"}"
    inner = parse_body(body)["x"]
    for _ in range(MAX_DEPTH - 2):
        inner = inner[0]
    assert inner == []


@pytest.mark.parametrize(
    "body, message",
    [
        (b'{"prompt": "\xff"}', "the body is not valid JSON: "),
        (b'{"prompt": ', "the body is not valid JSON: "),
        (b"[1, 2]", "the body must be a JSON object"),
    ],
)
def test_what_is_not_a_json_object_is_refused(body: bytes, message: str):
    error = refusal(parse_body, body)
    assert error.status == 400 and str(error).startswith(message)


def test_a_sound_body_comes_back_as_parsed():
    body = b'{"prompt": "caf\\u00e9", "temperature": 0.5, "max_tokens": 3, "stop": ["\\n"]}'
    assert parse_body(body) == {
        "prompt": "café",
        "temperature": 0.5,
        "max_tokens": 3,
        "stop": ["\n"],
    }
