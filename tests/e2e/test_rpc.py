"""The target across machines (issue 19): real `specrun rpc-server` processes on loopback ports
lend their devices to a real `specrun run --rpc`, with the tiny models.

Every server here is the command a worker machine runs; every client is the command a user
runs. The faults are real too: a port nobody listens on, a peer that answers the handshake
with another protocol version, a server killed while the target's layers are on it.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from specrun.llama import rpc
from tests.support.processes import finish, within
from tests.support.rpcserver import RpcServer, free_port


def specrun(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "specrun", *args],
        input="",
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def assert_one_line_error(
    result: subprocess.CompletedProcess, expected: str, code: int = 1
) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert len(lines) == 1 and lines[0].startswith("specrun: error: "), result.stderr
    assert expected in lines[0], lines[0]


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[tuple[RpcServer, RpcServer]]:
    servers = [RpcServer(tmp_path / f"server{i}.log") for i in range(2)]
    yield servers[0], servers[1]
    for server in servers:
        server.stop()


def test_greedy_output_split_over_two_servers_is_the_local_output(
    two_servers, tiny_target, tiny_draft
):
    first, second = two_servers
    common = [
        "run",
        "-t",
        str(tiny_target),
        "-d",
        str(tiny_draft),
        "--temp",
        "0",
        "-n",
        "40",
        "--threads",
        "1",
        "--json",
        "the sea",
    ]
    local = specrun(*common, "--gamma", "0")
    split = specrun(*common, "--gamma", "3", "--rpc", f"{first.endpoint},{second.endpoint}")
    assert local.returncode == split.returncode == 0, split.stderr
    answer, record = json.loads(local.stdout), json.loads(split.stdout)
    assert record["text"] == answer["text"] and answer["text"].strip()
    assert record["rpc"] == [first.endpoint, second.endpoint] and record["device"] == "CPU + RPC"
    # Both layers of the target remote, one on each server; the draft here.
    placement = split.stderr.strip().splitlines()[0]
    assert f"target: 2/2 layers on RPC0@{first.endpoint} + RPC1@{second.endpoint}" in placement, (
        placement
    )
    assert "split 0.50:0.50" in placement and "draft: on this machine's CPU" in placement, placement
    assert record["gpu_layers"] == ["2/2", "0/2"]


def test_a_server_nobody_runs_is_one_line_naming_it(tiny_target):
    endpoint = f"127.0.0.1:{free_port()}"
    result = specrun("run", "-t", str(tiny_target), "--threads", "1", "--rpc", endpoint, "hi")
    assert_one_line_error(result, f"cannot reach the RPC server {endpoint}: Connection refused")
    assert result.stdout == ""


def test_a_server_of_another_protocol_version_is_one_line(tiny_target):
    """A peer that answers the handshake as a server of protocol 6 would."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(60)  # the thread ends, whether or not specrun connects
        endpoint = f"127.0.0.1:{listener.getsockname()[1]}"

        def answer_once() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(1 + 8 + rpc.CAPS_SIZE)
                connection.sendall(
                    struct.pack("<Q", 4 + rpc.CAPS_SIZE)
                    + bytes([6, 1, 0, 0])
                    + bytes(rpc.CAPS_SIZE)
                )

        peer = threading.Thread(target=answer_once, daemon=True)
        peer.start()
        result = specrun("run", "-t", str(tiny_target), "--threads", "1", "--rpc", endpoint, "hi")
        peer.join(timeout=10)
    assert_one_line_error(
        result, f"the RPC server {endpoint} speaks protocol 6.1.0 and this llama.cpp 7.0.0"
    )


@pytest.mark.parametrize("value", ["localhost", "127.0.0.1:0", "127.0.0.1:x", ":50052", "a:1,a:1"])
def test_a_malformed_rpc_option_is_a_usage_error(tiny_target, value):
    result = specrun("run", "-t", str(tiny_target), "--rpc", value, "hi")
    assert_one_line_error(result, "--rpc", code=2)


def test_a_server_killed_mid_generation_ends_with_one_line_and_keeps_the_text(
    two_servers, tiny_target
):
    first, second = two_servers
    args = [
        "run",
        "-t",
        str(tiny_target),
        "--raw",
        "--temp",
        "0",
        "-n",
        "900",
        "--threads",
        "1",
        "the sea",
    ]
    local = specrun(*args)
    client = subprocess.Popen(
        [sys.executable, "-m", "specrun", *args, "--rpc", f"{first.endpoint},{second.endpoint}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    # generation is under way, its layers on both servers
    started = within(client, lambda: client.stdout.read(8), "the answer")
    second.kill()
    rest, stderr_bytes, code = finish(client)
    stderr = stderr_bytes.decode()
    assert code != 0, stderr
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith(f"specrun: error: lost the RPC server {second.endpoint}"), stderr
    assert first.endpoint not in lines[-1]
    assert "Traceback" not in stderr and "ggml-rpc.cpp" not in stderr
    # What was printed before the loss stays printed, and is the local answer's beginning.
    assert len(started) == 8 and local.stdout.encode().startswith(started + rest)
    assert len(started + rest) < len(local.stdout.encode())


def test_rpc_server_refuses_bad_input(tmp_path):
    assert_one_line_error(
        specrun("rpc-server", "--host", "localhost"), "--host must be an IPv4 address", code=2
    )
    assert_one_line_error(
        specrun("rpc-server", "--device", "NOPE0"), "--device: no device 'NOPE0' here", code=2
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert_one_line_error(
            specrun("rpc-server", "--port", str(port)), f"cannot listen on 127.0.0.1:{port}"
        )


def test_rpc_server_beyond_loopback_warns_that_nobody_is_checked(tmp_path):
    server = RpcServer(tmp_path / "open.log", "--host", "0.0.0.0")
    try:
        server.stop()
        assert "the RPC protocol has no authentication" in server.log.read_text()
    finally:
        server.stop()
