"""The server's checks before any handler runs, as pure functions: a body's bytes into JSON a
handler can use, the Host names it answers to, the content type it takes."""

from __future__ import annotations

import pytest

from specrun.server.requests import (
    MAX_DEPTH,
    AllowedHosts,
    ApiError,
    check_json_content,
    parse_body,
)


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


# --- the Host -----------------------------------------------------------------------------------

LOOPBACK = AllowedHosts.of("127.0.0.1")


@pytest.mark.parametrize(
    "host",
    [
        None,
        "localhost",
        "localhost:8080",
        "LOCALHOST.",
        "app.localhost:8080",
        "127.0.0.1:8080",
        "[::1]:8080",
        "[::1]",
        "192.168.1.20:8080",  # an address cannot be rebound
    ],
)
def test_loopback_names_and_addresses_are_answered(host: str | None):
    LOOPBACK.admit(host)


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.nip.io"]
)
def test_another_name_is_refused_with_the_way_to_allow_it(host: str):
    error = refusal(LOOPBACK.admit, host)
    assert (error.status, error.code) == (403, "host_not_allowed")
    assert f"--allowed-host {host.partition(':')[0]}" in str(error)


def test_the_name_listened_on_and_the_names_added_are_answered():
    hosts = AllowedHosts.of("box.lan", ["llm.home", ".example.org"])
    for host in ("box.lan:8080", "LLM.home", "example.org", "api.example.org:443", "localhost"):
        hosts.admit(host)
    for host in ("other.lan", "home", "badexample.org", "example.org.evil"):
        assert refusal(hosts.admit, host).status == 403


def test_a_star_answers_any_name():
    AllowedHosts.of("127.0.0.1", ["*"]).admit("anything.example")


# --- the content type ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"]
)
def test_json_is_taken(content_type: str):
    check_json_content(content_type)


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "",
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonp",
    ],
)
def test_anything_else_is_415(content_type: str | None):
    error = refusal(check_json_content, content_type)
    assert (error.status, error.code) == (415, "unsupported_media_type")
