"""`specrun serve` as clients meet it: a subprocess on a free port, and OpenAI's client."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import httpx
import openai

from tests.support.processes import DEADLINE, default_signals, kill

SERVING = re.compile(r"^specrun: serving (\S+) at (http://\S+)/v1 ")
STARTUP_LIMIT = 120  # seconds: a fail-safe for a server that never comes up, not a measurement


class Server:
    """`specrun serve` in a subprocess on a free port; stderr is collected as it comes."""

    def __init__(
        self,
        *options: str,
        env: dict[str, str] | None = None,
        program: tuple[str, ...] = ("-m", "specrun"),
        own_session: bool = False,
    ) -> None:
        """`program`: how Python starts specrun (a shim's `-c CODE`); `own_session`: its own
        process group, which a terminal's Ctrl-C (`os.killpg`) reaches."""
        command = [
            sys.executable,
            *program,
            "serve",
            "--port",
            "0",
            "--threads",
            "1",
            *options,
        ]
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
            start_new_session=own_session,
            preexec_fn=default_signals,  # the tests stop it with SIGTERM or Ctrl-C
        )
        self.lines: list[str] = []
        self.model = self.url = ""
        ready = threading.Event()
        self.reader = threading.Thread(target=self._read, args=(ready,), daemon=True)
        self.reader.start()
        if not ready.wait(STARTUP_LIMIT) or not self.url:
            kill(self.process)  # its stderr closes: the reader ends
            self.reader.join(DEADLINE)
            raise AssertionError("".join(self.lines) or "the server did not start")

    def _read(self, ready: threading.Event) -> None:
        for line in self.process.stderr:
            self.lines.append(line)
            if match := SERVING.match(line):
                self.model, self.url = match.groups()
                ready.set()
        ready.set()

    def client(self, api_key: str = "unused") -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key, max_retries=0)

    def stats(self) -> dict:
        return httpx.get(f"{self.url}/v1/stats").json()

    def wait_for(self, condition: Callable[[dict], bool]) -> dict:
        """Poll /v1/stats until `condition` holds (a fail-safe limit, not a timed assert)."""
        for _ in range(6000):
            figures = self.stats()
            if condition(figures):
                return figures
            time.sleep(0.02)
        raise AssertionError(f"never reached: {figures}")

    def stop(self, signum: int = signal.SIGTERM) -> int:
        self.process.send_signal(signum)
        status = self.process.wait(timeout=DEADLINE)
        self.reader.join(DEADLINE)  # every line of stderr is in
        assert not self.reader.is_alive(), "stderr stayed open after the server ended"
        return status


def chat(server: Server, content: str, **fields: object):
    return server.client().chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": content}], **fields
    )
