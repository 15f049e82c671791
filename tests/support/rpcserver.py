"""`specrun rpc-server` in a subprocess on a free loopback port, ready once it answers the
handshake: the command a worker machine runs, for the tests of `--rpc`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from specrun.errors import SpecrunError
from specrun.llama import rpc
from tests.support.processes import default_signals

READY_SECONDS = 60  # a loaded test machine takes a while to start Python and ggml
STOP_SECONDS = 30


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RpcServer:
    """`specrun rpc-server --port N --threads 1 EXTRA...`, run by `python` (this interpreter
    by default), in its own process group: the supervisor and the child that serves."""

    def __init__(
        self,
        log: Path,
        *extra: str,
        python: str = sys.executable,
        env: dict[str, str] | None = None,
    ) -> None:
        self.endpoint = f"127.0.0.1:{free_port()}"
        self.log = log
        with log.open("w") as out:
            self.process = subprocess.Popen(
                [python, "-m", "specrun", "rpc-server", "--port", self.endpoint.split(":")[1]]
                + ["--threads", "1", *extra],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=default_signals,  # stopped with SIGTERM
                env=env,
            )
        deadline = time.monotonic() + READY_SECONDS
        while True:
            try:
                rpc.check(self.endpoint)
                return
            except SpecrunError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"rpc-server did not start: {log.read_text()}") from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=STOP_SECONDS)

    def kill(self) -> None:
        """As a machine that dies: both processes at once, no goodbye on the connection."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=STOP_SECONDS)
