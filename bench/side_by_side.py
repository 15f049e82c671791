"""specrun beside native llama.cpp, over prompt files, interleaved: issue 14's table.

Rows (choose with ROWS, comma-separated; default all):
  native plain          llama-completion
  native draft          llama-speculative-simple with the draft model, n_max = n_min = GAMMA
  native ngram-simple   llama-speculative-simple's n-gram drafts, no draft model
  native ngram-mod
  specrun gamma 0       plain decoding
  specrun gamma N       the draft model at a fixed γ = GAMMA
  specrun auto fresh    the draft model, auto, starting from its warm-up (no learned state)
  specrun auto          the draft model, auto, starting from what earlier runs learned
  specrun lookup        prompt lookup (auto, learned state kept like a user's)
The native tools are built from the llama.cpp that the pinned llama-cpp-python vendors,
with specrun's CPU flags (bench/native_compare.sh builds them). Every prompt is sent raw
(no chat template), so every row sees the same tokens. A file's figure is its total
tokens (those of the answer: no row counts the end-of-generation token) over its total
decode seconds, wall time after the prompt (for llama-completion its total time less its
prompt eval time), per repetition; the table gives the median and the range, then each
row run by run against native plain on the same prompt (geometric mean and 95%
interval). Every specrun row's text is checked against `gamma 0`'s.

    .venv/bin/python bench/side_by_side.py bench/prompts/mixed.jsonl bench/prompts/heldout.jsonl
Env: REPEAT (3), TOKENS (128), THREADS (2), GAMMA (3), ROWS, NATIVE_BIN
(/tmp/specrun-native/build/bin), TARGET and DRAFT (default: the demo pair).
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPEAT = int(os.environ.get("REPEAT", 3))
TOKENS = int(os.environ.get("TOKENS", 128))
THREADS = os.environ.get("THREADS", "2")
GAMMA = os.environ.get("GAMMA", "3")
BIN = Path(os.environ.get("NATIVE_BIN", "/tmp/specrun-native/build/bin"))
TIMEOUT = float(
    os.environ.get("TIMEOUT", 120)
)  # seconds a run may take (native ngram-mod has hung)
SPECRUN = Path(sys.executable).with_name("specrun")
ALL_ROWS = [
    "native plain",
    "native draft",
    "native ngram-simple",
    "native ngram-mod",
    "specrun gamma 0",
    f"specrun gamma {GAMMA}",
    "specrun auto fresh",
    "specrun auto",
    "specrun lookup",
]
ROWS = (
    [row.strip() for row in os.environ["ROWS"].split(",")] if os.environ.get("ROWS") else ALL_ROWS
)
LEARNED = tempfile.mkdtemp(
    prefix="side-by-side-state-"
)  # the learned state of this run's `auto` rows


def models() -> tuple[str, str]:
    from specrun.models.demo import prepare_demo_pair

    target, draft = (os.environ.get(name) for name in ("TARGET", "DRAFT"))
    if not (target and draft):
        pair = prepare_demo_pair()
        target, draft = target or str(pair[0]), draft or str(pair[1])
    return target, draft


def native(row: str, target: str, draft: str, prompt: str) -> tuple[int, float]:
    """(tokens, seconds) of the decode, from the tool's own log."""
    common = ["-m", target, "-p", prompt, "-n", str(TOKENS), "--temp", "0", "-t", THREADS]
    if row == "native plain":
        log = _run([str(BIN / "llama-completion"), *common, "-no-cnv"])
        runs = int(re.findall(r" eval time =\s*[\d.]+ ms /\s*(\d+) runs", log)[-1])
        # Wall time, as every other row's: its total less the prompt's. Its eval and sampling
        # times leave out its own loop (~0.14 ms a token here); the total also holds ~0.7 ms
        # of setup before the prompt.
        total, prompt_eval = (
            float(re.findall(rf" {name} time =\s*([\d.]+) ms", log)[-1])
            for name in ("total", "prompt eval")
        )
        # The first token comes from the prompt's pass, so TOKENS tokens take TOKENS - 1 runs;
        # fewer runs means the answer ended, and the last run gave only the end-of-generation
        # token, which specrun does not count as a token either.
        tokens = runs if runs >= TOKENS - 1 else runs - 1
        return tokens, (total - prompt_eval) / 1000
    if row == "native draft":
        kind = [
            "-md",
            draft,
            "--spec-type",
            "draft-simple",
            "--spec-draft-n-max",
            GAMMA,
            "--spec-draft-n-min",
            GAMMA,
            "--spec-draft-p-min",
            "0",
        ]
    else:
        kind = ["--spec-type", row.split()[-1]]
    log = _run([str(BIN / "llama-speculative-simple"), *common, *kind])
    tokens, seconds = re.findall(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", log)[-1]
    # It runs past TOKENS unless the answer ends, and then its count includes the
    # end-of-generation token.
    return int(tokens) if int(tokens) > TOKENS else int(tokens) - 1, float(seconds)


def specrun(row: str, target: str, draft: str, prompt: str) -> tuple[int, float, str]:
    mode = row.removeprefix("specrun ")
    if mode == "lookup":
        args = ["--draft", "lookup"]
    elif mode.startswith("gamma"):
        args = ["--draft", draft, "--gamma", mode.split()[-1]]
    else:
        args = ["--draft", draft, "--gamma", "auto"]
    state = tempfile.mkdtemp(prefix="side-by-side-fresh-") if mode == "auto fresh" else LEARNED
    out = _run(
        [
            str(SPECRUN),
            "run",
            "-t",
            target,
            *args,
            "--raw",
            "--temp",
            "0",
            "-n",
            str(TOKENS),
            "--threads",
            THREADS,
            "--json",
            prompt,
        ],
        stderr=subprocess.DEVNULL,
        env=os.environ | {"XDG_STATE_HOME": state},
    )
    result = json.loads(out)
    return result["generated_tokens"], result["decode_seconds"], result["text"]


def _run(cmd: list[str], stderr: int = subprocess.STDOUT, env: dict | None = None) -> str:
    return subprocess.run(
        cmd,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        errors="replace",
        check=True,
        env=env,
        timeout=TIMEOUT,
    ).stdout


def main(files: list[str]) -> None:
    target, draft = models()
    sets = {f: [json.loads(line)["prompt"] for line in open(f) if line.strip()] for f in files}
    # What a user's `auto` would know: one earlier run, on a prompt of none of the sets.
    if "specrun auto" in ROWS:
        specrun(
            "specrun auto",
            target,
            draft,
            "Once upon a time, in a small village by the sea, there lived",
        )
    # totals[file][row][rep] = [tokens, seconds]
    totals = {f: {row: [[0, 0.0] for _ in range(REPEAT)] for row in ROWS} for f in files}
    texts: dict[tuple[str, int, str], str] = {}
    runs: dict[tuple[str, int, int, str], float] = {}  # (file, rep, prompt, row) -> tok/s
    hung: set[tuple[str, int, str]] = set()  # runs that did not finish within TIMEOUT
    for rep in range(REPEAT):  # interleaved, so drift in the machine's speed hits every row alike
        for f, prompts in sets.items():
            for i, prompt in enumerate(prompts):
                # The rows take turns at going first: a prompt's first run follows another
                # prompt's last, and no row should always be the one that does.
                turn = (rep * len(prompts) + i) % len(ROWS)
                for row in ROWS[turn:] + ROWS[:turn]:
                    try:
                        if row.startswith("native"):
                            tokens, seconds = native(row, target, draft, prompt)
                        else:
                            tokens, seconds, texts[f, i, row] = specrun(row, target, draft, prompt)
                    except subprocess.TimeoutExpired:
                        hung.add((f, i, row))
                        continue
                    totals[f][row][rep][0] += tokens
                    totals[f][row][rep][1] += seconds
                    runs[f, rep, i, row] = tokens / seconds
                    print(
                        f"{rep} {Path(f).name}:{i} {row}: {tokens / seconds:.1f} tok/s",
                        file=sys.stderr,
                        flush=True,
                    )
    print(
        f"{target} + {Path(draft).name}, {TOKENS} tokens a prompt, greedy, raw prompts, {THREADS} threads, "
        f"median of {REPEAT} (range)"
    )
    for f, prompts in sets.items():
        rates = {row: [t / s for t, s in totals[f][row]] for row in ROWS}
        plain = statistics.median(rates["native plain"]) if "native plain" in ROWS else None
        print(f"\n{f} ({len(prompts)} prompts)")
        for row in ROWS:
            median = statistics.median(rates[row])
            versus = f"{median / plain:5.2f}x native plain  " if plain else ""
            print(
                f"  {row:20} {median:6.1f} tok/s  {versus}({min(rates[row]):.1f}-{max(rates[row]):.1f})"
            )
        if plain:  # each run against native plain's on the same prompt, minutes apart at most
            for row in (r for r in ROWS if r != "native plain"):
                print(f"  {row:20} paired: {paired(runs, f, row)}")
        for row in ROWS:
            stuck = sorted(i for g, i, r in hung if g == f and r == row)
            if stuck:
                print(
                    f"  {row}: did not finish within {TIMEOUT:.0f} s on prompts {stuck} (left out of its figure)"
                )
        if "specrun gamma 0" in ROWS:
            for row in (r for r in ROWS if r.startswith("specrun") and r != "specrun gamma 0"):
                differ = [
                    i
                    for i in range(len(prompts))
                    if (f, i, row) in texts
                    and texts[f, i, row] != texts.get((f, i, "specrun gamma 0"))
                ]
                if differ:
                    print(f"  {row}: text differs from gamma 0 on prompts {differ}")


def paired(runs: dict[tuple[str, int, int, str], float], f: str, row: str) -> str:
    """The geometric mean of a row's tok/s over native plain's, run by run on the same prompt
    and repetition, with a 95% interval: single runs here move by 10%, their ratios less."""
    logs = [
        math.log(rate / runs[g, rep, i, "native plain"])
        for (g, rep, i, r), rate in runs.items()
        if g == f and r == row and (g, rep, i, "native plain") in runs
    ]
    if len(logs) < 2:
        return "too few runs"
    mean, half = statistics.mean(logs), 2 * statistics.stdev(logs) / math.sqrt(len(logs))
    return f"{math.exp(mean):.3f}x ({math.exp(mean - half):.3f}-{math.exp(mean + half):.3f}), {len(logs)} pairs"


if __name__ == "__main__":
    main(sys.argv[1:])
