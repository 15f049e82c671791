"""Hostile requests to `specrun serve` (issue 33): the real command on a free loopback port, spoken
to with httpx and raw sockets. Whatever the request, the answer is an error in OpenAI's shape
with the right status, the server serves on, and its log holds no traceback."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from specrun.server.requests import MAX_DEPTH
from tests.support.server import Server

CONTEXT = 256  # the strict server's --ctx, below the tiny model's trained context
READ_TIMEOUT = 1  # the strict server's --read-timeout, in seconds
FAIL_SAFE = 60  # seconds a socket or a command may wait: a limit on a broken test
JSON = {"Content-Type": "application/json"}
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"  # the demo model counts on for hundreds of tokens


@pytest.fixture(scope="module")
def server(tiny_target: Path):
    running = Server(
        "-t",
        str(tiny_target),
        "--ctx",
        str(CONTEXT),
        "--read-timeout",
        str(READ_TIMEOUT),
        "--allowed-host",
        "llm.lan",
        "--allowed-host",
        ".example.org",
    )
    yield running
    assert running.stop() == 0
    log = "".join(running.lines)
    assert "Traceback" not in log and "Exception" not in log, log


@pytest.fixture(scope="module")
def demo_server(demo_pair: tuple[Path, Path]):
    """The real pair: slow enough that a generation is still running while a test acts."""
    running = Server("-t", str(demo_pair[0]), "-d", str(demo_pair[1]))
    yield running
    assert running.stop() == 0


def post(server: Server, path: str, body: bytes | dict, headers: dict | None = None):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{server.url}{path}", content=content, headers=headers or JSON)


def openai_error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error.keys() == {"message", "type", "param", "code"} and error["message"]
    assert error["type"] == "invalid_request_error"
    return error


def serves_on(server: Server) -> None:
    answer = post(server, "/v1/completions", {"prompt": "the sea", "max_tokens": 2})
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] >= 1


def connect(server: Server) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    connection = socket.create_connection((host, int(port)))
    connection.settimeout(FAIL_SAFE)
    return connection


def raw_request(body: dict, *, host: str = "127.0.0.1") -> bytes:
    payload = json.dumps(body).encode()
    return (
        b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (host.encode(), len(payload), payload)
    )


def read_to_end(connection: socket.socket) -> bytes:
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    return received


# --- text and structure, checked once when the body is parsed -----------------------------------

SURROGATES = {
    "a completion's prompt": ("/v1/completions", rb'{"prompt": "\ud800"}', "prompt"),
    "a message's content": (
        "/v1/chat/completions",
        rb'{"messages": [{"role": "user", "content": "hi \udfff"}]}',
        "messages[0].content",
    ),
    "a text part": (
        "/v1/chat/completions",
        rb'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\ud83d"}]}]}',
        "messages[0].content[0].text",
    ),
    "a stop text": ("/v1/completions", rb'{"prompt": "hi", "stop": ["\udc00"]}', "stop[0]"),
    "the model's name": ("/v1/completions", rb'{"prompt": "hi", "model": "\ud800"}', "model"),
    "a key": ("/v1/completions", rb'{"prompt": "hi", "\ud800": 1}', None),
}


@pytest.mark.parametrize("case", SURROGATES)
def test_a_lone_surrogate_in_any_text_is_a_400(server, case):
    path, body, param = SURROGATES[case]
    error = openai_error(post(server, path, body), 400)
    assert (error["param"], error["code"]) == (param, "invalid_value")
    assert "lone surrogate" in error["message"]
    serves_on(server)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
def test_a_deeply_nested_body_is_a_400(server, depth):
    body = b'{"prompt": "hi", "x": ' + b"[" * depth + b"]" * depth + b"}"
    error = openai_error(post(server, "/v1/completions", body), 400)
    assert error["message"] == f"the body nests deeper than {MAX_DEPTH} levels"
    serves_on(server)


@pytest.mark.parametrize("number", ["Infinity", "-Infinity", "NaN", "1e400"])
@pytest.mark.parametrize("field", ["temperature", "top_p", "min_p"])
def test_every_non_finite_number_is_refused_alike(server, field, number):
    body = b'{"prompt": "hi", "max_tokens": 2, "%s": %s}' % (field.encode(), number.encode())
    error = openai_error(post(server, "/v1/completions", body), 400)
    assert (error["param"], error["code"]) == (field, "invalid_value")
    shown = "Infinity" if number == "1e400" else number
    assert error["message"] == f"`{field}` must be a finite number, got {shown}"


# --- who may ask: the Host and the content type, before any route -------------------------------


@pytest.mark.parametrize("path", ["/v1/models", "/health"])
def test_a_name_rebound_to_this_machine_is_refused(server, path):
    response = httpx.get(f"{server.url}{path}", headers={"Host": "attacker.example"})
    error = openai_error(response, 403)
    assert error["code"] == "host_not_allowed"
    assert "--allowed-host attacker.example" in error["message"]


def test_a_generation_for_a_foreign_host_never_starts(server):
    before = server.stats()["totals"]["requests"]
    body = {"prompt": "hi", "max_tokens": 2}
    response = post(server, "/v1/completions", body, {**JSON, "Host": "attacker.example:80"})
    assert openai_error(response, 403)["code"] == "host_not_allowed"
    assert server.stats()["totals"]["requests"] == before


@pytest.mark.parametrize(
    "host",
    ["localhost", "127.0.0.1", "[::1]", "app.localhost", "llm.lan", "example.org", "a.example.org"],
)
def test_loopback_names_addresses_and_allowed_hosts_are_answered(server, host):
    port = server.url.rsplit(":", 1)[1]
    response = httpx.get(f"{server.url}/v1/models", headers={"Host": f"{host}:{port}"})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", None],
)
def test_a_body_not_sent_as_json_is_a_415(server, content_type):
    """text/plain is what a web page may POST to any site without asking first."""
    headers = {"Content-Type": content_type} if content_type else {}
    body = json.dumps({"prompt": "hi", "max_tokens": 2}).encode()
    response = httpx.post(f"{server.url}/v1/completions", content=body, headers=headers)
    assert openai_error(response, 415)["code"] == "unsupported_media_type"


def test_json_with_a_charset_is_json(server):
    body = {"prompt": "hi", "max_tokens": 2}
    response = post(
        server, "/v1/completions", body, {"Content-Type": "application/json; charset=utf-8"}
    )
    assert response.status_code == 200, response.text


# --- deadlines ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sent, what",
    [
        (b"", "headers"),
        (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n", "headers"),
        (
            b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
            "body",
        ),
    ],
    ids=["nothing", "half the headers", "part of the body"],
)
def test_a_request_that_stops_coming_gets_a_408_and_is_let_go(server, sent, what):
    connection = connect(server)
    connection.sendall(sent)
    answer = read_to_end(connection).decode()  # the server closes: the deadline, not ours
    connection.close()
    head, _, body = answer.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 408 ") and "connection: close" in head.lower(), answer
    error = json.loads(body)["error"]
    assert error["code"] == "request_timeout"
    assert error["message"] == f"the request's {what} did not arrive within {READ_TIMEOUT} seconds"
    serves_on(server)


def test_a_client_that_leaves_halfway_through_its_body_leaves_no_trace(server):
    connection = connect(server)
    connection.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"pro'
    )
    connection.close()
    serves_on(server)  # and the module's teardown finds no traceback in the log


# --- a half-closed client is still a client -----------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_half_closes_after_its_request_gets_its_answer(server, stream):
    body = {"prompt": "the sea", "max_tokens": 8, "temperature": 0}
    expected = post(server, "/v1/completions", body).json()["choices"][0]["text"]
    connection = connect(server)
    connection.sendall(raw_request({**body, "stream": stream}))
    connection.shutdown(socket.SHUT_WR)  # nothing more to say, but still listening
    answer = read_to_end(connection).decode()
    connection.close()
    assert "HTTP/1.1 200 OK" in answer, answer
    if stream:
        events = re.findall(r"data: (.*)\n\n", answer)  # each event is one chunk
        assert events[-1] == "[DONE]"
        text = "".join(json.loads(event)["choices"][0]["text"] for event in events[:-1])
    else:
        text = json.loads(answer.rsplit("\r\n\r\n", 1)[1])["choices"][0]["text"]
    assert text == expected


def test_a_half_closed_client_that_then_leaves_cancels_its_generation(demo_server):
    server = demo_server
    before = server.stats()["totals"]["cancelled"]
    connection = connect(server)
    body = {"prompt": COUNTING, "max_tokens": 2000, "temperature": 0, "stream": True}
    connection.sendall(raw_request(body))
    connection.shutdown(socket.SHUT_WR)
    received = b""
    while received.count(b'"text": "') < 3:  # the answer streams on after the half-close
        chunk = connection.recv(4096)
        assert chunk, received
        received += chunk
    connection.close()
    totals = server.wait_for(lambda s: s["running"] == [])["totals"]
    assert totals["cancelled"] == before + 1 and totals["completion_tokens"] < 2000


# --- the context, in a client's terms -----------------------------------------------------------


def test_a_prompt_too_long_for_the_context_says_what_the_client_can_do(server):
    response = post(server, "/v1/completions", {"prompt": "the " * (2 * CONTEXT)})
    error = openai_error(response, 400)
    assert (error["param"], error["code"]) == ("prompt", "context_length_exceeded")
    assert f"this server's context is {CONTEXT} tokens" in error["message"]
    assert "send a prompt shorter than" in error["message"]
    assert "`" not in error["message"] and "ctx" not in error["message"]


# --- the command line ---------------------------------------------------------------------------


def serve_fails(tiny_target: Path, *options: str, env: dict[str, str] | None = None) -> str:
    """`specrun serve` that must refuse to start: its one line of stderr."""
    result = subprocess.run(
        [sys.executable, "-m", "specrun", "serve", "-t", str(tiny_target), "--port", "0", *options],
        capture_output=True,
        text=True,
        timeout=FAIL_SAFE,
        env={**os.environ, **(env or {})},
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "options, env",
    [
        (["--api-key", ""], {}),
        ([], {"SPECRUN_API_KEY": ""}),
        (["--api-key", "  "], {}),
    ],
    ids=["flag", "environment", "blank"],
)
def test_an_empty_api_key_is_refused_however_it_is_given(tiny_target, options, env):
    line = serve_fails(tiny_target, *options, env=env)
    assert line == "specrun: error: --api-key (or $SPECRUN_API_KEY) is empty"


@pytest.mark.parametrize(
    "options, flag",
    [(["--read-timeout", "0"], "--read-timeout"), (["--allowed-host", ""], "--allowed-host")],
)
def test_bad_deadlines_and_host_names_are_one_line_usage_errors(tiny_target, options, flag):
    line = serve_fails(tiny_target, *options)
    assert line.startswith("specrun: error: ") and flag in line
