"""`specrun serve`'s HTTP/1.1 connections: uvicorn's h11 protocol with a deadline on a request's
headers (uvicorn times only the wait between requests), so a client that opens a connection and
sends nothing, or half a request, is answered 408 and let go."""

from __future__ import annotations

import asyncio
import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from specrun.server.requests import ApiError


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

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_headers()

    def data_received(self, data: bytes) -> None:
        if self._headers_due is None and self.conn.their_state is h11.IDLE:
            self._await_headers()  # the next request on a kept-alive connection begins
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the headers are in
            self._stop_waiting()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
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
        error = late("headers", self.read_timeout)
        body = json.dumps(error.body()).encode()
        self.transport.write(
            b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
        )
        self.transport.close()


def connection_type(read_timeout: float) -> type[Connection]:
    """The protocol uvicorn is given: `Connection` with this server's deadline."""
    return type("Connection", (Connection,), {"read_timeout": read_timeout})
