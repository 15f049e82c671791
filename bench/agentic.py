"""An agentic workload through one server: episodes of several requests sent in order, each
mode a fresh server, the same episodes, greedy; specrun's draft sources beside native
llama-server's n-gram modes (issue 51).

An episode (a line of specrun/data/agentic.jsonl, `specrun bench --agentic`'s) is a system
message and turns: with "history", a conversation, each request carrying every earlier turn
and the server's own answers (a function edited turn by turn, tool results fed back);
without, each turn a request of its own under the same system message (one schema over many
records, a template filled anew). Every request is the conversation written out with the
target's chat template (its markup as text) and sent raw to /v1/completions, so that both
servers see the same tokens; `--tokens` at most each.

Modes (choose with --modes, comma-separated; default all, in this order):
  specrun plain       specrun serve --gamma 0
  specrun lookup      --draft lookup (prompt lookup, γ auto)
  specrun suffix      --draft suffix (prompt and earlier answers of the server, γ auto)
  specrun lookup tree --draft lookup --tree 4 (its drafts as token trees of 4 branches)
  specrun suffix tree --draft suffix --tree 4
  specrun draft       -d DRAFT (the demo pair's draft model, γ auto)
  native plain        llama-server
  native ngram-mod    llama-server --spec-type ngram-mod
  native ngram-cache  llama-server --spec-type ngram-cache
Each server has one slot (requests in order, as an agent sends them), --ctx tokens, and
--threads threads; specrun's a fresh state folder each time it starts (nothing learned
carries over from an earlier server). The repetitions are interleaved as
bench/side_by_side.py's: each runs every mode once, the modes taking turns at going first.

Figures per mode, the median over repetitions: completion tokens over the requests' wall
time as the client sees it (prompt included), and over the servers' own decode time
(specrun's `decode_seconds`, llama-server's `timings.predicted_ms`); each against specrun
plain's, median of the ratios run by run. Every specrun mode's answers are checked against
specrun plain's (greedy identity), every native mode's against native plain's.

    .venv/bin/python bench/agentic.py [--repeat 3] [--modes "specrun plain,specrun suffix"]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.server_grammar import llama_server  # noqa: E402
from specrun.bench import EPISODES, Episode, load_episodes  # noqa: E402
from tests.support.server import Server  # noqa: E402

MODES = (
    "specrun plain",
    "specrun lookup",
    "specrun suffix",
    "specrun lookup tree",
    "specrun suffix tree",
    "specrun draft",
    "native plain",
    "native ngram-mod",
    "native ngram-cache",
)
PLAIN = "specrun plain"
NATIVE_PORT = 18182
REQUEST_TIMEOUT = 600.0  # seconds: a fail-safe for a server that stops answering


@dataclass(frozen=True)
class Answer:
    """One request's answer and figures."""

    text: str
    tokens: int  # completion tokens, as the server counts them
    wall: float  # seconds, as the client waited
    decode: float  # seconds, the server's own decode time (after the prompt)
    drafted: int
    accepted: int
    rounds: int | None  # target passes of its decode (specrun's; llama-server says not)


Render = Callable[[list[tuple[str, str]]], str]  # (role, content) turns -> raw prompt text


def complete(client: httpx.Client, url: str, prompt: str, tokens: int) -> Answer:
    """A raw prompt's greedy answer from specrun serve or llama-server."""
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": False}
    start = time.perf_counter()
    response = client.post(f"{url}/v1/completions", json=body)
    wall = time.perf_counter() - start
    if response.status_code != 200:
        raise SystemExit(f"{url}: {response.status_code} {response.text[:300]}")
    answer = response.json()
    text = answer["choices"][0]["text"]
    tokens_out = answer["usage"]["completion_tokens"]
    if "specrun" in answer:
        figures = answer["specrun"]
        return Answer(
            text,
            tokens_out,
            wall,
            figures["decode_seconds"],
            figures["drafted"],
            figures["accepted"],
            figures["rounds"],
        )
    timings = answer["timings"]  # llama-server's
    return Answer(
        text,
        tokens_out,
        wall,
        timings["predicted_ms"] / 1000,
        timings.get("draft_n", 0),
        timings.get("draft_n_accepted", 0),
        None,
    )


def run_episode(
    client: httpx.Client, url: str, episode: Episode, render: Render, tokens: int
) -> list[Answer]:
    """The episode's requests in order; with history, each answer joins the conversation."""
    answers = []
    conversation: list[tuple[str, str]] = [("system", episode.system)]
    for turn in episode.turns:
        asked = [*conversation, ("user", turn)]
        answer = complete(client, url, render(asked), tokens)
        answers.append(answer)
        if episode.history:
            conversation = [*asked, ("assistant", answer.text)]
    return answers


def chat_renderer(target: Path) -> Render:
    """Turns written out with the target's chat template, ending where the answer begins."""
    from specrun.llama.model import Model
    from specrun.prompt import Message, chat_text

    model = Model(str(target), n_ctx=256, threads=1)  # kept open: the renderer reads it

    def render(turns: list[tuple[str, str]]) -> str:
        return chat_text(model, [Message(role, content) for role, content in turns])  # type: ignore[arg-type]

    return render


@contextmanager
def server(mode: str, args: argparse.Namespace, target: Path, draft: Path) -> Iterator[str]:
    """A fresh server of the mode, one slot; its URL until the block ends."""
    threads = str(args.threads)
    if mode.startswith("native"):
        spec = {"native plain": [], "native ngram-mod": ["--spec-type", "ngram-mod"]}
        spec["native ngram-cache"] = ["--spec-type", "ngram-cache"]
        extra = ("-np", "1", "-c", str(args.ctx), "-t", threads, "-tb", threads, *spec[mode])
        process = llama_server(args.native / "llama-server", target, None, NATIVE_PORT, extra)
        try:
            yield f"http://127.0.0.1:{NATIVE_PORT}"
        finally:
            process.terminate()
            process.wait(timeout=60)
        return
    drafting = {
        "specrun plain": ["--gamma", "0"],
        "specrun lookup": ["--draft", "lookup"],
        "specrun suffix": ["--draft", "suffix"],
        "specrun lookup tree": ["--draft", "lookup", "--tree", "4"],
        "specrun suffix tree": ["--draft", "suffix", "--tree", "4"],
        "specrun draft": ["-d", str(draft)],
    }[mode]
    options = ["-t", str(target), *drafting, "--parallel", "1", "--ctx", str(args.ctx)]
    with tempfile.TemporaryDirectory(prefix="agentic-state-") as state:
        started = Server(*options, "--threads", threads, env={"XDG_STATE_HOME": state})
        try:
            yield started.url
        finally:
            started.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--episodes", type=Path, default=EPISODES, help="(default: specrun bench --agentic's)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="interleaved repetitions (3)")
    parser.add_argument("--tokens", type=int, default=128, help="most tokens a request (128)")
    parser.add_argument("--threads", type=int, default=2, help="threads of every server (2)")
    parser.add_argument("--ctx", type=int, default=4096, help="context of every server (4096)")
    parser.add_argument(
        "--modes",
        type=lambda text: [mode.strip() for mode in text.split(",")],
        default=list(MODES),
        help="modes to run, comma-separated, in this order (default: all)",
    )
    parser.add_argument(
        "--native",
        type=Path,
        default=Path("/tmp/specrun-native/build/bin"),
        help="folder of llama-server (default: /tmp/specrun-native/build/bin)",
    )
    parser.add_argument("--json", type=Path, help="also write every answer and figure here")
    parser.add_argument("--target", type=Path, help="the target GGUF (default: the demo pair's)")
    parser.add_argument("--draft", type=Path, help="the draft GGUF (default: the demo pair's)")
    args = parser.parse_args(argv)
    unknown = [mode for mode in args.modes if mode not in MODES]
    if unknown:
        parser.error(f"unknown mode {unknown[0]!r}; the modes: {', '.join(MODES)}")
    if args.repeat < 1 or args.tokens < 1:
        parser.error("--repeat and --tokens must be at least 1")
    return args


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.target is None or args.draft is None:
        from specrun.models.demo import prepare_demo_pair

        demo = prepare_demo_pair()
        args.target, args.draft = args.target or demo[0], args.draft or demo[1]
    episodes = load_episodes(args.episodes)
    render = chat_renderer(args.target)
    modes: list[str] = args.modes
    # answers[mode][rep]: every request's, episode by episode in order
    answers: dict[str, list[list[list[Answer]]]] = {mode: [] for mode in modes}
    with httpx.Client(timeout=REQUEST_TIMEOUT) as client:
        for rep in range(args.repeat):
            turn = rep % len(modes)
            for mode in modes[turn:] + modes[:turn]:
                with server(mode, args, args.target, args.draft) as url:
                    done = [run_episode(client, url, e, render, args.tokens) for e in episodes]
                answers[mode].append(done)
                tokens = sum(a.tokens for episode in done for a in episode)
                wall = sum(a.wall for episode in done for a in episode)
                print(f"{rep} {mode}: {tokens / wall:.1f} tok/s", file=sys.stderr, flush=True)
    report(args, episodes, answers)
    if args.json:
        args.json.write_text(json.dumps({m: runs for m, runs in answers.items()}, default=vars))


def rate(episodes: list[list[Answer]], decode: bool, only: int | None = None) -> float:
    chosen = [e for i, e in enumerate(episodes) if only is None or i == only]
    tokens = sum(a.tokens for episode in chosen for a in episode)
    seconds = sum(a.decode if decode else a.wall for episode in chosen for a in episode)
    return tokens / seconds


def report(
    args: argparse.Namespace,
    episodes: list[Episode],
    answers: dict[str, list[list[list[Answer]]]],
) -> None:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    requests = sum(len(e.turns) for e in episodes)
    print(f"bench/agentic.py, {datetime.datetime.now():%Y-%m-%d %H:%M}, commit {commit}")
    print(f"machine: {machine()}")
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")
    print(
        f"{args.target.name} (draft {args.draft.name}), {args.episodes.name}: {len(episodes)} "
        f"episodes, {requests} requests, greedy, at most {args.tokens} tokens a request, "
        f"{args.threads} threads, one slot of {args.ctx} tokens; median of {args.repeat}"
    )
    modes = list(answers)
    for decode in (False, True):
        print("\ndecode time (the server's own)" if decode else "\nwall time (prompt included)")
        for mode in modes:
            rates = [rate(run, decode) for run in answers[mode]]
            versus = ""
            if PLAIN in answers and mode != PLAIN:
                ratios = [
                    rate(run, decode) / rate(plain, decode)
                    for run, plain in zip(answers[mode], answers[PLAIN])
                ]
                versus = f"  {statistics.median(ratios):5.2f}x plain"
            low, high = min(rates), max(rates)
            print(
                f"  {mode:20} {statistics.median(rates):6.1f} tok/s ({low:.1f}-{high:.1f}){versus}"
            )
    print("\nby episode, wall time (tok/s, and x specrun plain)")
    header = "".join(f"{e.name:>18}" for e in episodes)
    print(f"  {'':20}{header}")
    for mode in modes:
        cells = ""
        for index in range(len(episodes)):
            median = statistics.median(rate(run, False, index) for run in answers[mode])
            ratio = ""
            if PLAIN in answers:
                plain = statistics.median(rate(run, False, index) for run in answers[PLAIN])
                ratio = f" {median / plain:.2f}x"
            cells += f"{f'{median:.1f}{ratio}':>18}"
        print(f"  {mode:20}{cells}")
    print("\ndrafting and answers, every repetition")
    for mode in modes:
        flat = [a for run in answers[mode] for episode in run for a in episode]
        drafted, accepted = sum(a.drafted for a in flat), sum(a.accepted for a in flat)
        tokens = sum(a.tokens for a in flat) // len(answers[mode])
        rounds = [a.rounds for a in flat if a.rounds is not None]
        per_round = (
            f", {sum(a.tokens for a in flat) / sum(rounds):.2f} tokens a round" if rounds else ""
        )
        # native plain's against specrun plain's: whether both servers answered alike
        reference = (
            "native plain" if mode.startswith("native ") and mode != "native plain" else PLAIN
        )
        same = ""
        if reference in answers and mode != reference:
            texts = [a.text for run in answers[mode] for episode in run for a in episode]
            base = [a.text for run in answers[reference] for episode in run for a in episode]
            differ = sum(x != y for x, y in zip(texts, base))
            verdict = f"{differ} of {len(texts)} differ from" if differ else "identical to"
            same = f", answers {verdict} {reference}'s"
            first = [
                f"{episode.name}:{turn}"
                for episode, mine, theirs in zip(episodes, answers[mode][0], answers[reference][0])
                for turn, (x, y) in enumerate(zip(mine, theirs))
                if x.text != y.text
            ]
            same += f" (first repetition: {', '.join(first)})" if first else ""
        share = f"{accepted / drafted:.2f}" if drafted else "-"
        print(
            f"  {mode:20} {tokens} tokens a repetition, drafted {drafted}, accepted {accepted} "
            f"({share}){per_round}{same}"
        )


if __name__ == "__main__":
    main()
