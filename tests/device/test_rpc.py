"""`specrun rpc-server` lending the Vulkan device to a client whose own build has only the
CPU: the target's layers go to the remote device, the draft stays on the client, and greedy
output is the client's own plain decoding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from specrun.llama.placement import gigabytes
from tests.device.conftest import cpu_environment, cpu_python
from tests.support.rpcserver import RpcServer

PROMPT = "the cat and the dog in the big red road"
CLIENT_SECONDS = 300


def cpu_client(*args: str) -> subprocess.CompletedProcess:
    """`specrun ARGS` from the CPU build's environment."""
    done = subprocess.run(
        [cpu_python(), "-m", "specrun", *args],
        input="",
        capture_output=True,
        text=True,
        timeout=CLIENT_SECONDS,
        env=cpu_environment(),
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done


def test_a_vulkan_device_served_to_a_cpu_client(tmp_path: Path, tiny_target, tiny_draft, vulkan):
    server = RpcServer(tmp_path / "server.log", python=sys.executable)  # every GPU: the device
    try:
        common = ["run", "-t", str(tiny_target), "-d", str(tiny_draft), "--temp", "0"]
        common += ["-n", "32", "--threads", "1", "--json", PROMPT]
        local = json.loads(cpu_client(*common, "--gamma", "0").stdout)
        remote = cpu_client(*common, "--gamma", "3", "--rpc", server.endpoint)
    finally:
        server.stop()
    record = json.loads(remote.stdout)
    assert record["text"] == local["text"] and local["text"].strip()
    assert record["device"] == "CPU + RPC" and record["rpc"] == [server.endpoint]
    assert record["gpu_layers"] == ["2/2", "0/2"]  # the target remote, the draft here
    # The remote device is the Vulkan one: its memory, as the server reports it.
    assert f"RPC0@{server.endpoint}" in record["fit"]
    assert f"of {gigabytes(vulkan.total_bytes)} GB free" in record["fit"], record["fit"]
    # auto: whole rows from a server whose backend cannot be told from here (a Vulkan one, as
    # this, would crash in llama.cpp's backend samplers).
    assert "backend_sampling" not in record
