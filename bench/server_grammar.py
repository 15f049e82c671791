"""Constrained JSON through the OpenAI API: `specrun serve` against llama-server, the same
pair, the same GBNF (a JSON schema's, sent as llama-server's `grammar` field), the same
request, each server alone on the machine in turn.

llama-server is built from the llama.cpp the pinned llama-cpp-python vendors, with
specrun's flags (bench/native_compare.sh's build folder; `cmake --build build --target
llama-server` there). Rows: each server plain, and with the draft model. The figure is the
server's own decode rate (llama-server's `timings.predicted_per_second`, specrun's
`specrun.tokens_per_second`) and the request's wall time.

    .venv/bin/python bench/server_grammar.py [--native DIR] [--repeat 3] [--tokens 128]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specrun.llama.grammar import schema_grammar  # noqa: E402
from specrun.models.demo import prepare_demo_pair  # noqa: E402
from tests.support.server import Server  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "toys": {"type": "array", "items": {"type": "string"}},
        "story": {"type": "string"},
    },
    "required": ["name", "age", "toys", "story"],
}
ASK = "Describe a cat as JSON: its name, its age, its favourite toys and a short story about it."


def request(url: str, tokens: int) -> tuple[float, float, str]:
    body = {
        "messages": [{"role": "user", "content": ASK}],
        "max_tokens": tokens,
        "temperature": 0,
        # The same GBNF text to both: llama-server's own schema converter allows other
        # whitespace than llama-cpp-python's port, which specrun uses.
        "grammar": schema_grammar(SCHEMA),
    }
    start = time.perf_counter()
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600).json()
    wall = time.perf_counter() - start
    rate = (
        answer["timings"]["predicted_per_second"]
        if "timings" in answer
        else answer["specrun"]["tokens_per_second"]
    )
    return rate, wall, answer["choices"][0]["message"]["content"]


def llama_server(
    binary: Path, target: Path, draft: Path | None, port: int, extra: Sequence[str] = ()
) -> subprocess.Popen:
    """llama-server on the pair, up and healthy; `extra` options override the defaults here."""
    command = [str(binary), "-m", str(target), "--port", str(port), "-t", "2", "-c", "2048"]
    command += extra
    if draft is not None:
        command += ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", "8"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        if process.poll() is not None:
            raise SystemExit(f"llama-server exited {process.returncode}: {' '.join(command)}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise SystemExit("llama-server did not come up")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--native", type=Path, default=Path("/tmp/specrun-native/build/bin"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    target, draft = prepare_demo_pair()
    rows: dict[str, list[tuple[float, float]]] = {}
    texts: dict[str, str] = {}
    for _ in range(args.repeat):  # interleaved: drift in the machine's speed hits every row
        for name, with_draft in (("llama-server", False), ("llama-server -md DRAFT", True)):
            process = llama_server(
                args.native / "llama-server", target, draft if with_draft else None, 18181
            )
            try:
                rate, wall, text = request("http://127.0.0.1:18181", args.tokens)
            finally:
                process.terminate()
                process.wait()
            rows.setdefault(name, []).append((rate, wall))
            texts[name] = text
        for name, options in (
            ("specrun serve --gamma 0", ("--gamma", "0")),
            ("specrun serve -d DRAFT (auto)", ("-d", str(draft))),
        ):
            server = Server("-t", str(target), "--threads", "2", *options)
            try:
                rate, wall, text = request(server.url.removesuffix("/v1"), args.tokens)
            finally:
                server.stop()
            rows.setdefault(name, []).append((rate, wall))
            texts[name] = text
    print(f"{target.name} + {draft.name}, greedy, JSON schema, median of {args.repeat}")
    for name, runs in rows.items():
        rate = statistics.median(r for r, _ in runs)
        wall = statistics.median(w for _, w in runs)
        print(
            f"{name:32} {rate:6.1f} tok/s  {wall:5.2f} s  ({' '.join(f'{r:.1f}' for r, _ in runs)})"
        )
    for name, text in texts.items():
        print(f"{name}: {json.dumps(text)[:150]}")


if __name__ == "__main__":
    main()
