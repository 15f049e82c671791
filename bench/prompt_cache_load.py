"""Repeated prompts through the OpenAI API, on loopback: `specrun serve --cache-ram` against
llama-server `--cache-ram` (built from the vendored llama.cpp), the same demo pair, the same
slots and context, the same threads; each server alone on the machine in turn, the rounds
interleaved (server A, server B, A, B, ...) so that drift in the machine's load hits each.

There are more conversations than slots (`--conversations`, 8 against 4 slots), each a long
prompt of its own sent again and again (an agent resending its context; a chat coming back):
request n sends conversation n mod 8, so a returning prompt finds its slot taken by another
and is restored from host memory where the server keeps one. Figures per client count:
aggregate completion tokens per second over the run, time to first token (p50), and the
requests that failed.

    .venv/bin/python bench/prompt_cache_load.py [--native DIR] [--clients 1 4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.server_grammar import llama_server  # noqa: E402
from bench.server_load import CTX, SLOTS, Sample, load, one_request  # noqa: E402
from specrun.models.demo import prepare_demo_pair  # noqa: E402
from tests.support.server import Server  # noqa: E402

TOPICS = ["the sea", "prime numbers", "fruit", "a robot", "the planets", "emails", "a forest",
          "the sky"]  # fmt: skip
PARAGRAPH = (
    "Here are notes on {topic}, number {k}. They go on for a while so that the prompt is long "
    "enough for its prefill to matter: line {line} of the notes says that {topic} is worth "
    "a careful look, and that each detail of it deserves a sentence of its own. "
)


def conversation(k: int, lines: int) -> str:
    topic = TOPICS[k % len(TOPICS)]
    notes = "".join(PARAGRAPH.format(topic=topic, k=k, line=i) for i in range(lines))
    return f"{notes}\nIn one sentence, what are these notes about?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--native", type=Path, default=Path("/tmp/specrun-native/build/bin"))
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--requests", type=int, default=24, help="per client count and round")
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--lines", type=int, default=12, help="paragraphs in each prompt")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache-ram", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=None, help="rows whose name contains one")
    args = parser.parse_args()
    target, draft = prepare_demo_pair()
    threads, cache = str(args.threads), str(args.cache_ram)
    prompts = [conversation(k, args.lines) for k in range(args.conversations)]
    common = ("-t", str(target), "-d", str(draft), "--threads", threads, "--ctx", str(CTX),
              "--parallel", str(SLOTS), "--temp", "0")  # fmt: skip
    configs: list[tuple[str, str, tuple[str, ...]]] = [
        (f"specrun -d DRAFT --cache-ram {cache}", "specrun", (*common, "--cache-ram", cache)),
        (f"llama-server -md DRAFT --cache-ram {cache}", "llama", ("--cache-ram", cache)),
        ("specrun -d DRAFT --cache-ram 0", "specrun", (*common, "--cache-ram", "0")),
        ("llama-server -md DRAFT --cache-ram 0", "llama", ("--cache-ram", "0")),
    ]
    if args.only:
        configs = [c for c in configs if any(part in c[0] for part in args.only)]
    results: dict[tuple[str, int], list[tuple[float, list[Sample]]]] = {}
    for _ in range(args.rounds):
        for name, kind, options in configs:
            if kind == "specrun":
                server = Server(*options)
                url, stop = server.url, server.stop
            else:
                slots = ("-np", str(SLOTS), "-c", str(SLOTS * CTX), "-t", threads, "-tb", threads)
                process = llama_server(
                    args.native / "llama-server", target, draft, 18181, extra=(*slots, *options)
                )
                url = "http://127.0.0.1:18181"

                def stop(process: subprocess.Popen = process) -> None:
                    process.terminate()
                    process.wait()

            try:
                for clients in args.clients:
                    one_request(httpx.Client(timeout=600), url, "Hello.", 4)  # warm
                    results.setdefault((name, clients), []).append(
                        load(
                            url,
                            clients,
                            args.requests,
                            args.tokens,
                            lambda n: prompts[n % len(prompts)],
                        )
                    )
            finally:
                stop()
    print(
        f"{target.name} + {draft.name}, greedy, {args.tokens} tokens a request, "
        f"{args.conversations} prompts of ~{len(prompts[0]) // 4} tokens repeated, "
        f"{args.requests} requests per client count and round, {args.rounds} rounds, "
        f"{SLOTS} slots of {CTX} tokens, {args.threads} threads"
    )
    print(f"{'':40} {'clients':>7} {'agg tok/s':>9} {'ttft p50':>8} {'lost':>4}")
    for (name, clients), runs in results.items():
        done = [s for _, samples in runs for s in samples if s.ok]
        lost = sum(len(samples) for _, samples in runs) - len(done)
        rate = sum(s.tokens for s in done) / sum(wall for wall, _ in runs)
        first = statistics.median([s.first_token for s in done] or [0.0])
        print(f"{name:40} {clients:7} {rate:9.1f} {first:8.3f} {lost:4}")


if __name__ == "__main__":
    main()
