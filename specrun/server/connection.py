"""`specrun serve`'s HTTP/1.1 connections: uvicorn's h11 protocol with two changes.

A request's headers have a deadline (uvicorn times only the wait between requests), so a
client that opens a connection and sends nothing, or half a request, is answered 408 and let go.

A client that shuts down its writing side once its request is sent (a half-close) is still
answered. asyncio closes a connection at the end of its input unless the protocol keeps it, and
uvicorn reads that as the client leaving, which cancels its generation. But the end of input
looks the same whether the client only stopped sending or closed its socket and left; only
data sent to it tells them apart, since a closed socket answers data with a reset. So the
connection is kept, an interim `100 Continue` goes out (HTTP/1.1 clients must skip an
unexpected 1xx response) unless the answer has begun, and the socket is checked for that reset
until the answer is done: a client that left still cancels, one that reads on gets its answer.
Without that data (an HTTP/1.0 client, or a pause in a stream) a client that left is noticed
at the next write."""

from __future__ import annotations

import asyncio
import json
import socket

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from specrun.server.requests import ApiError

PEER_CHECK_SECONDS = 0.5  # how often a half-closed connection is checked for a reset


def late(what: str, seconds: float) -> ApiError:
    """The 408 for a request that did not arrive within its deadline."""
    return ApiError(
        408,
        f"the request's {what} did not arrive within {seconds:g} seconds",
        code="request_timeout",
        headers={"Connection": "close"},
    )


class Connection(H11Protocol):
    """One client's connection; `read_timeout` is the server's, set by `connection_type`."""

    read_timeout: float

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._headers_due: asyncio.TimerHandle | None = None
        self._half_closed = False  # the client sent its request whole, then shut its side
        self._peer_check: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_headers()

    def data_received(self, data: bytes) -> None:
        if self._headers_due is None and self.conn.their_state is h11.IDLE:
            self._await_headers()  # the next request on a kept-alive connection begins
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the headers are in
            self._stop_waiting()

    def eof_received(self) -> bool:  # type: ignore[override]
        """Keep writing to a client whose request came whole and is not yet answered."""
        request_whole = self.conn.their_state in (h11.DONE, h11.MUST_CLOSE)
        if self.cycle is not None and not self.cycle.response_complete and request_whole:
            self._half_closed = True
            # Data, to draw a reset from a closed socket; HTTP/1.0 has no interim responses.
            if not self.cycle.response_started and self.conn.their_http_version != b"1.0":
                interim = h11.InformationalResponse(status_code=100, headers=[], reason="Continue")
                self.transport.write(self.conn.send(interim))
            self._check_peer()
            return True
        return False  # nothing to answer: close, as asyncio does by default

    def _check_peer(self) -> None:
        """Until the answer is done: a reset means the client closed its socket and left."""
        self._peer_check = None
        sock = self.transport.get_extra_info("socket")
        if self.transport.is_closing() or sock is None:
            return
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            self.transport.abort()  # uvicorn tells the app the client disconnected
            return
        self._peer_check = self.loop.call_later(PEER_CHECK_SECONDS, self._check_peer)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._half_closed:  # the client can send no other request
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        if self._peer_check is not None:
            self._peer_check.cancel()
        super().connection_lost(exc)

    def _await_headers(self) -> None:
        self._headers_due = self.loop.call_later(self.read_timeout, self._headers_late)

    def _stop_waiting(self) -> None:
        if self._headers_due is not None:
            self._headers_due.cancel()
            self._headers_due = None

    def _headers_late(self) -> None:
        """No request has begun, so h11 may not answer: the 408 is written as is."""
        self._headers_due = None
        if self.transport.is_closing():
            return
        self._refuse(late("headers", self.read_timeout), b"Request Timeout")

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes h11 cannot read as a request, in the API's shape rather
        than its plain text."""
        error = ApiError(400, "the request is not HTTP/1.1 this server can read", code="bad_http")
        self._refuse(error, b"Bad Request")

    def _refuse(self, error: ApiError, reason: bytes) -> None:
        """Write `error` as the answer, outside h11's states, and close the connection."""
        body = json.dumps(error.body()).encode()
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s"
            % (error.status, reason, len(body), body)
        )
        self.transport.close()


def connection_type(read_timeout: float) -> type[Connection]:
    """The protocol uvicorn is given: `Connection` with this server's deadline."""
    return type("Connection", (Connection,), {"read_timeout": read_timeout})
