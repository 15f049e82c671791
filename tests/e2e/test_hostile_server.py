"""Hostile requests to `specrun serve` (issue 49): a request whose generation fails fails alone,
keys and schemes as RFC 7235 reads them, user input echoed in an error only in part, a refused
browser preflight and unreadable HTTP in the API's error shape, and long stop strings bounded
where the API says."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from specrun.server.bodies import MAX_STOP_CHARS, MAX_STOPS
from specrun.server.requests import MAX_ECHOED_CHARS
from tests.support.server import Server

FAIL_SAFE = 60  # seconds any request may take: a limit on a broken test, not a measurement
MARK = "<fail here>"  # a stop string the shim's bug fires on
FAILING_ROUND = 3  # the round of the marked generation that raises
# The real command, with a bug planted in the round loop of the generations whose stop strings
# hold MARK: a Python exception in one request's third round, as any bug in a round would be.
PLANTED_BUG = f"""
import sys
import specrun.core.text as text
sys.argv = ["specrun", *sys.argv[1:]]
feed = text.TextStream.feed
def failing_feed(self, tokens, from_draft):
    if {MARK!r} in self.stop:
        self.rounds = getattr(self, "rounds", 0) + 1
        if self.rounds == {FAILING_ROUND}:
            raise RuntimeError("a bug planted in this request's round")
    return feed(self, tokens, from_draft)
text.TextStream.feed = failing_feed
from specrun.__main__ import entry
entry()
"""
LONG = {"prompt": "the sea", "temperature": 0, "max_tokens": 1000}  # about a second's answer
KEY = "clé-ü"  # an API key beyond ASCII, sent as UTF-8
KEYED = {"Authorization": f"Bearer {KEY}".encode()}
ORIGIN = "http://localhost:3000"


def events(response: httpx.Response) -> Iterator[dict]:
    """A streamed answer's server-sent events, as JSON, up to [DONE]."""
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line.removeprefix("data: "))


def streamed_text(chunks: Iterator[dict]) -> tuple[str, str | None]:
    """The text of a completion's chunks and the finish_reason of the last."""
    text, reason = [], None
    for chunk in chunks:
        assert "error" not in chunk, chunk
        text.append(chunk["choices"][0]["text"])
        reason = chunk["choices"][0]["finish_reason"] or reason
    return "".join(text), reason


@pytest.fixture(scope="module")
def server(tiny_target: Path):
    """Two slots, a key, a page's origin let in, and the planted bug."""
    running = Server(
        "-t",
        str(tiny_target),
        "--parallel",
        "2",
        "--api-key",
        KEY,
        "--cors",
        ORIGIN,
        program=("-c", PLANTED_BUG),
    )
    yield running
    assert running.stop() == 0


def client(server: Server) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers=KEYED, timeout=FAIL_SAFE)


def stats(server: Server) -> dict:
    with client(server) as keyed:
        return keyed.get("/v1/stats").json()


def settled(server: Server) -> dict:
    """/v1/stats once no generation runs (a fail-safe limit, not a timed assert)."""
    deadline = time.monotonic() + FAIL_SAFE
    while (figures := stats(server))["running"] and time.monotonic() < deadline:
        time.sleep(0.02)
    return figures


def completion(server: Server, **body: object) -> httpx.Response:
    with client(server) as keyed:
        return keyed.post("/v1/completions", json=body)


def test_a_generation_that_fails_fails_alone(server):
    """Two requests whose round raises, one answered whole and one streamed, while a long one
    runs beside them: each failing client gets a 500 in OpenAI's shape (the streamed one as its
    last event), the long answer is the one it gives alone, every slot is free after, and the
    log has the bug's traceback for whoever runs the server."""
    alone = completion(server, **LONG).json()
    failing = {"prompt": "the cat", "temperature": 0, "max_tokens": 50, "stop": [MARK]}
    with client(server) as keyed:
        with keyed.stream("POST", "/v1/completions", json={**LONG, "stream": True}) as long:
            chunks = events(long)
            first = next(chunks)  # the long generation runs
            whole = keyed.post("/v1/completions", json=failing)
            with keyed.stream("POST", "/v1/completions", json={**failing, "stream": True}) as part:
                *_, last = events(part)
            beside = stats(server)["running"]
            text, reason = streamed_text(chunks)
    assert whole.status_code == 500, whole.text
    error = whole.json()["error"]
    assert error["type"] == "server_error" and "RuntimeError" in error["message"]
    assert last["error"]["type"] == "server_error" and "RuntimeError" in last["error"]["message"]
    assert len(beside) == 1, beside  # the long one was still running when both had failed
    assert first["choices"][0]["text"] + text == alone["choices"][0]["text"]
    assert reason == alone["choices"][0]["finish_reason"] == "length"
    figures = settled(server)
    assert figures["slots"] == {"total": 2, "busy": 0} and figures["totals"]["failed"] == 2
    again = completion(server, **LONG).json()
    assert again["choices"][0]["text"] == alone["choices"][0]["text"]  # and it serves on
    log = "".join(server.lines)
    assert log.count("RuntimeError: a bug planted in this request's round") == 2, log


@pytest.mark.parametrize(
    "sent, status",
    [
        (b"Bearer " + KEY.encode(), 200),
        (b"bearer " + KEY.encode(), 200),  # RFC 7235: the scheme in any case
        (b"Bearer " + KEY.encode("latin-1"), 401),  # the same characters, other bytes
        (b"Bearer " + KEY.encode()[:-1], 401),
    ],
)
def test_the_key_is_its_utf8_bytes_and_the_scheme_any_case(server, sent, status):
    answer = httpx.get(f"{server.url}/v1/models", headers={"Authorization": sent})
    assert answer.status_code == status, answer.text


def test_a_long_model_name_comes_back_cut(server):
    name = "m" * 2**20
    refused = completion(server, prompt="hi", model=name)
    assert refused.status_code == 404 and len(refused.content) < 1000
    error = refused.json()["error"]
    assert (error["param"], error["code"]) == ("model", "model_not_found")
    assert f"`{name[:MAX_ECHOED_CHARS]}... ({2**20} characters)`" in error["message"]


def test_a_refused_preflight_is_an_error_in_the_apis_shape(server):
    asked = {"Access-Control-Request-Method": "POST"}
    let_in = httpx.options(f"{server.url}/v1/completions", headers={"Origin": ORIGIN, **asked})
    assert let_in.status_code == 200 and let_in.headers["access-control-allow-origin"] == ORIGIN
    refused = httpx.options(
        f"{server.url}/v1/completions", headers={"Origin": "http://evil.example", **asked}
    )
    assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
    assert refused.headers["content-type"] == "application/json"
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "cors_not_allowed")
    assert "--cors http://evil.example" in error["message"]


def test_stop_strings_cut_where_they_start_within_the_bounds(server):
    """A stop across several tokens cuts the answer where it starts; one at the length bound that
    the answer begins but never completes is held, then shown whole; one more string or one more
    character is refused, saying the bounds."""
    answer = completion(server, prompt="the sea", temperature=0, max_tokens=40).json()
    text = answer["choices"][0]["text"]
    stop = text[5:25]
    cut = completion(server, prompt="the sea", temperature=0, max_tokens=40, stop=[stop]).json()
    assert cut["choices"][0]["text"] == text[: text.index(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"
    begun = text[5:] + "\x00" * (MAX_STOP_CHARS - len(text[5:]))
    stops = [begun] + ["\x01"] * (MAX_STOPS - 1)
    held = completion(server, prompt="the sea", temperature=0, max_tokens=40, stop=stops).json()
    assert held["choices"][0]["text"] == text and held["choices"][0]["finish_reason"] == "length"
    for beyond in ([*stops, "\x02"], [begun + "\x00"]):
        refused = completion(server, prompt="the sea", stop=beyond)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert (error["param"], error["code"]) == ("stop", "invalid_value")
        assert f"at most {MAX_STOPS} strings of at most {MAX_STOP_CHARS}" in error["message"]


@pytest.mark.parametrize(
    "field, value",
    [("logit_bias", {"1" * 5000: 1.0}), ("repeat_last_n", -5)],
    ids=["a token id of 5000 digits", "repeat_last_n below 0"],
)
def test_a_client_error_is_a_400_naming_its_field(server, field, value):
    refused = completion(server, prompt="hi", **{field: value})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert (error["param"], error["code"]) == (field, "invalid_value")
    assert len(refused.content) < 1000


def test_bytes_that_are_not_http_get_an_error_in_the_apis_shape(server):
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=FAIL_SAFE) as connection:
        connection.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer = b""
        while chunk := connection.recv(65536):  # the server closes the connection
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head
    error = json.loads(body)["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "bad_http")
