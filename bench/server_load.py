"""Several clients at once through the OpenAI API, on loopback: `specrun serve` against
llama-server built from the vendored llama.cpp with specrun's flags, the same pair, the same
slots, each server alone on the machine in turn, the rounds interleaved.

Each client sends its share of the requests one after another (streamed, greedy, a prompt
from a fixed list, `--tokens` each) and the figures are: aggregate completion tokens per
second over the whole run, per-request latency (p50, p95) and time to first token (p50),
and requests that failed or came back short (lost). A row per server and draft setting,
a column group per client count; `specrun --parallel 1` is today's single slot before this
change, for the latency at the most clients.

    .venv/bin/python bench/server_load.py [--native DIR] [--clients 1 2 4 8] [--requests 16]
    .venv/bin/python bench/server_load.py --vs-run [--repeat 3]

`--vs-run` instead: one client of `serve --parallel 4` against `specrun run` on the same
prompts, interleaved: each answer's own decode rate (the `specrun` figures' tokens_per_second).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.server_grammar import llama_server  # noqa: E402
from specrun.models.demo import prepare_demo_pair  # noqa: E402
from tests.support.server import Server  # noqa: E402

PROMPTS = [
    "Write a short poem about the sea.",
    "Explain what a prime number is to a child.",
    "List five fruits and say one thing about each.",
    "Tell me a story about a robot who learns to paint.",
    "What are the planets of the solar system?",
    "Give three tips for writing clear emails.",
    "Describe a walk in a forest in autumn.",
    "Why is the sky blue? Answer in a few sentences.",
]
SLOTS = 4
CTX = 2048  # tokens per slot


@dataclass(frozen=True)
class Sample:
    latency: float
    first_token: float
    tokens: int
    ok: bool


def one_request(client: httpx.Client, url: str, prompt: str, tokens: int) -> Sample:
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    first = None
    completion = 0
    try:
        with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                return Sample(time.perf_counter() - start, 0.0, 0, False)
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                choices = chunk.get("choices") or []
                if first is None and choices and choices[0].get("delta", {}).get("content"):
                    first = time.perf_counter() - start
                if chunk.get("usage"):
                    completion = chunk["usage"]["completion_tokens"]
    except httpx.HTTPError:
        return Sample(time.perf_counter() - start, 0.0, 0, False)
    latency = time.perf_counter() - start
    return Sample(latency, first or latency, completion, completion > 0)


def own_prompt(n: int) -> str:
    """Request n's prompt, each its own: llama-server keeps whole prompts in a host-memory
    cache (--cache-ram) that `load` measures apart (bench/prompt_cache_load.py); shared
    prefixes count alike."""
    return f"{PROMPTS[n % len(PROMPTS)]} (Request {n}.)"


def load(
    url: str, clients: int, requests: int, tokens: int, prompt_of: Callable[[int], str] = own_prompt
) -> tuple[float, list[Sample]]:
    """`requests` spread over `clients` threads, request n sending `prompt_of(n)`; the wall
    time and every request's sample."""
    samples: list[Sample] = []
    lock = threading.Lock()

    def client_loop(index: int) -> None:
        # A connection per request: llama-server (cpp-httplib) closes a kept-alive connection
        # after five requests, and a request sent on it then is lost to a client that does
        # not retry.
        with httpx.Client(timeout=600, limits=httpx.Limits(max_keepalive_connections=0)) as client:
            for n in range(index, requests, clients):
                sample = one_request(client, url, prompt_of(n), tokens)
                with lock:
                    samples.append(sample)

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, samples


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def warm(url: str, tokens: int) -> None:
    with httpx.Client(timeout=600) as client:
        one_request(client, url, PROMPTS[0], tokens)


def vs_run(target: Path, threads: str, tokens: int, repeat: int) -> None:
    """One request at a time to a server with slots, and `specrun run`, prompt by prompt."""
    options = ("--threads", threads, "--ctx", str(CTX), "-t", str(target))
    server = Server(*options, "--parallel", str(SLOTS))
    rates: dict[str, list[float]] = {"serve --parallel 4": [], "run": []}
    try:
        with httpx.Client(timeout=600) as client:
            for _ in range(repeat):
                for prompt in PROMPTS:
                    body = {
                        "messages": [{"role": "user", "content": prompt}],
                        "max_tokens": tokens,
                        "temperature": 0,
                    }
                    answer = client.post(f"{server.url}/v1/chat/completions", json=body).json()
                    rates["serve --parallel 4"].append(answer["specrun"]["tokens_per_second"])
                    command = [sys.executable, "-m", "specrun", "run", "--json", *options]
                    command += ["-n", str(tokens), "--temp", "0", prompt]
                    ran = subprocess.run(command, capture_output=True, text=True, check=True)
                    rates["run"].append(json.loads(ran.stdout)["tokens_per_second"])
    finally:
        server.stop()
    print(f"{target.name}, greedy, {tokens} tokens, {len(PROMPTS)} prompts x {repeat}")
    for name, values in rates.items():
        print(f"{name:20} median {statistics.median(values):6.1f} tok/s")
    ratio = statistics.median(rates["serve --parallel 4"]) / statistics.median(rates["run"])
    print(f"serve / run: {ratio:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--native", type=Path, default=Path("/tmp/specrun-native/build/bin"))
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--requests", type=int, default=16, help="per client count")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=None, help="rows whose name contains one")
    parser.add_argument("--vs-run", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="--vs-run's rounds of the prompts")
    args = parser.parse_args()
    target, draft = prepare_demo_pair()
    threads = str(args.threads)
    if args.vs_run:
        vs_run(target, threads, args.tokens, args.repeat)
        return
    specrun_common = ("-t", str(target), "--threads", threads, "--ctx", str(CTX))
    configs: list[tuple[str, str, tuple[str, ...]]] = [
        ("specrun --parallel 1 (before)", "specrun", (*specrun_common, "--parallel", "1")),
        ("specrun --parallel 4", "specrun", (*specrun_common, "--parallel", "4")),
        (
            "specrun --parallel 4 -d DRAFT",
            "specrun",
            (*specrun_common, "--parallel", "4", "-d", str(draft)),
        ),
        ("llama-server -np 4", "llama", ()),
        ("llama-server -np 4 -md DRAFT", "llama", ("draft",)),
    ]
    if args.only:
        configs = [c for c in configs if any(part in c[0] for part in args.only)]
    results: dict[str, dict[int, tuple[float, list[Sample]]]] = {}
    for clients in args.clients:
        for name, kind, options in configs:
            if kind == "specrun":
                server = Server(*options)
                url = server.url
                stop = server.stop
            else:
                process = llama_server_slots(
                    args.native / "llama-server",
                    target,
                    draft if options else None,
                    threads,
                )
                url = "http://127.0.0.1:18181"

                def stop(process: subprocess.Popen = process) -> None:
                    process.terminate()
                    process.wait()

            try:
                warm(url, 8)
                results.setdefault(name, {})[clients] = load(
                    url, clients, max(args.requests, clients), args.tokens
                )
            finally:
                stop()
    print(
        f"{target.name} + {draft.name}, greedy, {args.tokens} tokens a request, "
        f"{args.requests} requests per client count, {SLOTS} slots of {CTX} tokens, "
        f"{args.threads} threads"
    )
    print(
        f"{'':32} {'clients':>7} {'agg tok/s':>9} {'p50 s':>6} {'p95 s':>6} "
        f"{'ttft p50':>8} {'lost':>4}"
    )
    for name, by_clients in results.items():
        for clients, (wall, samples) in by_clients.items():
            done = [s for s in samples if s.ok]
            rate = sum(s.tokens for s in done) / wall
            latencies = [s.latency for s in done] or [0.0]
            first = [s.first_token for s in done] or [0.0]
            print(
                f"{name:32} {clients:7} {rate:9.1f} {statistics.median(latencies):6.2f} "
                f"{percentile(latencies, 0.95):6.2f} {statistics.median(first):8.2f} "
                f"{len(samples) - len(done):4}"
            )


def llama_server_slots(
    binary: Path, target: Path, draft: Path | None, threads: str
) -> subprocess.Popen:
    """llama-server with SLOTS slots of CTX tokens each, as specrun's."""
    return llama_server(
        binary,
        target,
        draft,
        18181,
        extra=("-np", str(SLOTS), "-c", str(SLOTS * CTX), "-t", threads, "-tb", threads),
    )


if __name__ == "__main__":
    main()
