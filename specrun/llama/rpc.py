"""llama.cpp's RPC backend: other machines lend their devices, and the target's layers go there.

A worker runs ggml's own RPC server, started in-process through the RPC registry of the
ggml library llama-cpp-python ships (`serve`). The main process adds each server's
devices (`connect`) and hands them to the target's model parameters; the draft never
sees them, since a draft across the network would pay a round trip per token.

ggml aborts the process when a server cannot be reached, speaks another protocol
version, or drops the connection (GGML_ABORT in ggml-rpc.cpp). So each server is
checked first with the protocol's own handshake, here, where a failure is a one-line
error; a connection lost later still aborts, and `explain_abort` (called from the
supervisor's abort callback) turns ggml's message into a line naming the server. A server
that stops answering without closing the connection is waited on for ever: ggml's client
has no deadline and no way to set one. `connect` tells the supervisor which servers are in
use, so that a stop signal still ends such a wait, naming them (specrun.llama.supervise).
"""

from __future__ import annotations

import ctypes
import re
import socket
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from specrun.errors import OptionError, SpecrunError
from specrun.llama import supervise
from specrun.llama.devices import (
    Device,
    backend_function,
    describe,
    device_handle,
    devices,
    registry_devices,
)
from specrun.system.numerals import whole_number

# RPC_PROTO_*_VERSION in the pinned llama.cpp's ggml-rpc.h: a client talks to a server of
# the same major version and of a minor version no newer than its own.
PROTOCOL = (7, 0, 0)
DEFAULT_PORT = 50052
HELLO = 14  # RPC_CMD_HELLO, fixed across protocol versions
CAPS_SIZE = 24  # RPC_CONN_CAPS_SIZE: transport capabilities; all zero is plain TCP
ANSWER_SECONDS = 5.0  # a server serves one client at a time: one that is busy does not answer
PROBE_SECONDS = 1.0  # after a lost connection: which server still accepts one
SETTLE_SECONDS = 0.5  # a server that just died may close its connection before its port
ABORT_SOURCE = "ggml-rpc.cpp:"  # ggml's abort messages from the RPC client start so

_AddServer = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
_StartServer = ctypes.CFUNCTYPE(
    None,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_size_t,
    ctypes.c_size_t,
    ctypes.POINTER(ctypes.c_void_p),
)
_connected: list[str] = []  # the servers this process uses: the suspects when a connection is lost


class RpcError(SpecrunError):
    """An RPC server that cannot be used, named in the message."""


@dataclass(frozen=True)
class Remote:
    """One device of an RPC server, as a model's device list takes it."""

    endpoint: str  # HOST:PORT as given
    device: Device  # name "RPC0", ..., its free and total memory as the server reports them
    handle: int


def parse_endpoints(text: str) -> tuple[str, ...]:
    """`HOST:PORT[,HOST:PORT...]` -> the endpoints, checked for form only."""
    endpoints = tuple(part.strip() for part in text.split(","))
    for endpoint in endpoints:
        host, _, digits = endpoint.rpartition(":")
        port = whole_number(digits)
        if not host or port is None or not 0 < port < 65536 or ":" in host:
            raise OptionError(
                f"`rpc` takes HOST:PORT[,HOST:PORT...] with an IPv4 address or host name, "
                f"got {endpoint!r}"
            )
    if len(set(endpoints)) < len(endpoints):
        raise OptionError(f"`rpc` names a server twice: {text}")
    return endpoints


def _address(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def _receive(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed the connection")
        data += chunk
    return data


def handshake(endpoint: str, timeout: float = ANSWER_SECONDS) -> tuple[int, int, int]:
    """The server's protocol version, asked as ggml's client asks it (RPC_CMD_HELLO)."""
    try:
        sock = socket.create_connection(_address(endpoint), timeout=timeout)
    except OSError as error:  # refused, unknown host, unreachable, timed out
        hint = (
            ": is `specrun rpc-server` running there?"
            if isinstance(error, ConnectionRefusedError)
            else ""
        )
        raise RpcError(
            f"cannot reach the RPC server {endpoint}: {error.strerror or error}{hint}"
        ) from None
    try:
        with sock:
            sock.sendall(struct.pack("<BQ", HELLO, CAPS_SIZE) + bytes(CAPS_SIZE))
            (size,) = struct.unpack("<Q", _receive(sock, 8))
            if size != 4 + CAPS_SIZE:
                raise RpcError(
                    f"{endpoint} did not answer as a ggml RPC server (a reply of {size} bytes)"
                )
            major, minor, patch, _ = _receive(sock, 4)
            return major, minor, patch
    except TimeoutError:
        raise RpcError(
            f"the RPC server {endpoint} did not answer within {timeout:.0f} s (it serves one "
            "client at a time: is another specrun using it?)"
        ) from None
    except OSError as error:  # it hung up on the handshake, as a server of an older protocol does
        raise RpcError(
            f"the RPC server {endpoint} broke off the handshake ({error.strerror or error}): is it "
            "a ggml RPC server of another llama.cpp version?"
        ) from None


def check(endpoint: str) -> None:
    """Fail with one line unless ggml's client here can work with this server."""
    major, minor, patch = handshake(endpoint)
    if major != PROTOCOL[0] or minor > PROTOCOL[1]:
        raise RpcError(
            f"the RPC server {endpoint} speaks protocol {major}.{minor}.{patch} and this llama.cpp "
            f"{'.'.join(map(str, PROTOCOL))}: install the same llama-cpp-python (`pip install "
            "specrun` of the same version) on both machines"
        )


def _function(name: str, prototype: type[ctypes._CFunctionType]) -> ctypes._CFunctionType:
    """The RPC backend's function `name` as `prototype`, a class CFUNCTYPE made (typeshed calls
    them _CFunctionType, a name that exists for type checkers only)."""
    address = backend_function("RPC", name)
    if not address:
        raise RpcError(
            "this llama.cpp build has no RPC backend: rebuild it with -DGGML_RPC=ON "
            "(`make llama` does; see `specrun doctor`)"
        )
    return prototype(address)


def connect(endpoints: Sequence[str]) -> list[Remote]:
    """Each server checked, then its devices added, as llama.cpp's own `--rpc` does."""
    add = _function("ggml_backend_rpc_add_server", _AddServer)
    remotes = []
    for endpoint in endpoints:
        check(endpoint)
        if endpoint not in _connected:
            _connected.append(endpoint)
        # From here ggml may wait on the server with no deadline: the supervisor names it.
        supervise.uses_servers(_connected)
        reg = add(endpoint.encode())
        handles = registry_devices(reg) if reg else []
        if not handles:
            raise RpcError(f"the RPC server {endpoint} offers no device")
        remotes += [Remote(endpoint, describe(handle), handle) for handle in handles]
    return remotes


def free_bytes(remotes: Sequence[Remote]) -> int:
    """Free memory over the remote devices now, as their servers report it."""
    return sum(describe(remote.handle).free_bytes for remote in remotes)


def explain_abort(message: str) -> str | None:
    """ggml's abort in its RPC client, in words that name the server; None for any other abort."""
    if not message.startswith(ABORT_SOURCE) or not _connected:
        return None
    time.sleep(SETTLE_SECONDS)
    gone = [endpoint for endpoint in _connected if not _accepts(endpoint)]
    if gone:
        return (
            f"lost the RPC server {', '.join(gone)}: it stopped or cannot be reached "
            "(the text so far was kept); restart `specrun rpc-server` there and run again"
        )
    detail = re.sub(r"^ggml-rpc\.cpp:\d+: ", "", message).strip()
    return (
        f"an RPC server ({', '.join(_connected)}) broke off the connection ({detail}); "
        "check those machines and run again"
    )


def _accepts(endpoint: str) -> bool:
    """Whether a connection to the server still opens: a busy server still accepts one (its
    backlog holds it), so probe once; a second probe could find that backlog full."""
    try:
        socket.create_connection(_address(endpoint), timeout=PROBE_SECONDS).close()
        return True
    except OSError:
        return False


# --- the server -------------------------------------------------------------------------


def server_devices(names: Sequence[str]) -> list[int]:
    """The devices named, else every GPU, else the CPU: llama.cpp's rpc-server's choice."""
    if not names:
        found = [d.name for d in devices() if d.kind not in ("CPU", "accelerator")] or ["CPU"]
        return [handle for name in found if (handle := device_handle(name))]
    handles = []
    for name in names:
        handle = device_handle(name)
        if handle is None:
            known = ", ".join(d.name for d in devices())
            raise OptionError(f"--device: no device {name!r} here (there are: {known})")
        handles.append(handle)
    return handles


def start_server(host: str, port: int, handles: Sequence[int], threads: int) -> threading.Thread:
    """ggml's RPC server on HOST:PORT in a thread of its own; it returns only if it cannot
    listen."""
    start = _function("ggml_backend_rpc_start_server", _StartServer)
    array = (ctypes.c_void_p * len(handles))(*handles)
    endpoint = f"{host}:{port}".encode()
    # Without a cache folder: every client sends the weights it places here again.
    thread = threading.Thread(
        target=start,
        args=(endpoint, None, threads, len(handles), array),
        name="rpc-server",
        daemon=True,
    )
    thread.start()
    return thread
