"""specrun beside native llama.cpp, over prompt files, interleaved: issue 14's table.

Rows (choose with --rows, comma-separated; default all, in this order):
  native plain          llama-completion
  native draft          llama-speculative-simple with the draft model, n_max = n_min = --gamma
  native ngram-simple   llama-speculative-simple's n-gram drafts, no draft model
  native ngram-mod
  specrun gamma 0       plain decoding
  specrun gamma N       the draft model at a fixed γ = N (--gamma)
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
    .venv/bin/python bench/side_by_side.py --repeat 4 \\
        --rows "native plain,specrun gamma 0,specrun auto" bench/prompts/mixed.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SPECRUN = Path(sys.executable).with_name("specrun")


def all_rows(gamma: int) -> list[str]:
    return [
        "native plain",
        "native draft",
        "native ngram-simple",
        "native ngram-mod",
        "specrun gamma 0",
        f"specrun gamma {gamma}",
        "specrun auto fresh",
        "specrun auto",
        "specrun lookup",
    ]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "files",
        nargs="+",
        metavar="FILE.jsonl",
        help='prompt files: JSON lines, each with a "prompt"',
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="interleaved repetitions; the median is shown (3)"
    )
    parser.add_argument(
        "--tokens", type=int, default=128, help="tokens to generate for each prompt (128)"
    )
    parser.add_argument("--threads", type=int, default=2, help="threads of every row (2)")
    parser.add_argument(
        "--gamma",
        type=int,
        default=3,
        help="the fixed γ of `native draft` and `specrun gamma N` (3)",
    )
    parser.add_argument(
        "--rows",
        type=lambda text: [row.strip() for row in text.split(",")],
        help="the rows to run, comma-separated, in the order given (default: all, as above)",
    )
    parser.add_argument(
        "--native-bin",
        type=Path,
        default=Path("/tmp/specrun-native/build/bin"),
        help="folder of llama-completion and llama-speculative-simple "
        "(default: /tmp/specrun-native/build/bin, where bench/native_compare.sh builds them)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=120,
        help="seconds a run may take; one that takes longer is left out of its row's figure "
        "(native ngram-mod has hung) (120)",
    )
    parser.add_argument("--target", help="the target GGUF (default: the demo pair's)")
    parser.add_argument("--draft", help="the draft GGUF (default: the demo pair's)")
    args = parser.parse_args(argv)
    args.rows = args.rows or all_rows(args.gamma)
    return args


def models(args: argparse.Namespace) -> tuple[str, str]:
    target, draft = args.target, args.draft
    if not (target and draft):
        from specrun.models.demo import prepare_demo_pair

        pair = prepare_demo_pair()
        target, draft = target or str(pair[0]), draft or str(pair[1])
    return target, draft


def native(
    row: str, args: argparse.Namespace, target: str, draft: str, prompt: str
) -> tuple[int, float]:
    """(tokens, seconds) of the decode, from the tool's own log."""
    n, threads, gamma = str(args.tokens), str(args.threads), str(args.gamma)
    common = ["-m", target, "-p", prompt, "-n", n, "--temp", "0", "-t", threads]
    if row == "native plain":
        log = _run([str(args.native_bin / "llama-completion"), *common, "-no-cnv"], args.timeout)
        runs = int(re.findall(r" eval time =\s*[\d.]+ ms /\s*(\d+) runs", log)[-1])
        # Wall time, as every other row's: its total less the prompt's. Its eval and sampling
        # times leave out its own loop (~0.14 ms a token here); the total also holds ~0.7 ms
        # of setup before the prompt.
        total, prompt_eval = (
            float(re.findall(rf" {name} time =\s*([\d.]+) ms", log)[-1])
            for name in ("total", "prompt eval")
        )
        # The first token comes from the prompt's pass, so --tokens tokens take one run fewer;
        # fewer runs means the answer ended, and the last run gave only the end-of-generation
        # token, which specrun does not count as a token either.
        tokens = runs if runs >= args.tokens - 1 else runs - 1
        return tokens, (total - prompt_eval) / 1000
    if row == "native draft":
        kind = [
            "-md",
            draft,
            "--spec-type",
            "draft-simple",
            "--spec-draft-n-max",
            gamma,
            "--spec-draft-n-min",
            gamma,
            "--spec-draft-p-min",
            "0",
        ]
    else:
        kind = ["--spec-type", row.split()[-1]]
    log = _run([str(args.native_bin / "llama-speculative-simple"), *common, *kind], args.timeout)
    tokens, seconds = re.findall(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", log)[-1]
    # It runs past --tokens unless the answer ends, and then its count includes the
    # end-of-generation token.
    return int(tokens) if int(tokens) > args.tokens else int(tokens) - 1, float(seconds)


def specrun(
    row: str, args: argparse.Namespace, target: str, draft: str, prompt: str, learned: str
) -> tuple[int, float, str]:
    """(tokens, seconds, text) of `specrun run`; `auto` and `lookup` keep their learned state
    in `learned` across runs, `auto fresh` starts from none."""
    mode = row.removeprefix("specrun ")
    if mode == "lookup":
        drafting = ["--draft", "lookup"]
    elif mode.startswith("gamma"):
        drafting = ["--draft", draft, "--gamma", mode.split()[-1]]
    else:
        drafting = ["--draft", draft, "--gamma", "auto"]
    state = tempfile.mkdtemp(prefix="side-by-side-fresh-") if mode == "auto fresh" else learned
    out = _run(
        [
            str(SPECRUN),
            "run",
            "-t",
            target,
            *drafting,
            "--raw",
            "--temp",
            "0",
            "-n",
            str(args.tokens),
            "--threads",
            str(args.threads),
            "--json",
            prompt,
        ],
        args.timeout,
        stderr=subprocess.DEVNULL,
        env=os.environ | {"XDG_STATE_HOME": state},
    )
    result = json.loads(out)
    return result["generated_tokens"], result["decode_seconds"], result["text"]


def _run(
    cmd: list[str], timeout: float, stderr: int = subprocess.STDOUT, env: dict | None = None
) -> str:
    return subprocess.run(
        cmd,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        errors="replace",
        check=True,
        env=env,
        timeout=timeout,
    ).stdout


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rows, repeat = args.rows, args.repeat
    target, draft = models(args)
    learned = tempfile.mkdtemp(prefix="side-by-side-state-")  # the `auto` rows' learned state
    sets = {f: [json.loads(line)["prompt"] for line in open(f) if line.strip()] for f in args.files}
    # What a user's `auto` would know: one earlier run, on a prompt of none of the sets.
    if "specrun auto" in rows:
        specrun(
            "specrun auto",
            args,
            target,
            draft,
            "Once upon a time, in a small village by the sea, there lived",
            learned,
        )
    # totals[file][row][rep] = [tokens, seconds]
    totals = {f: {row: [[0, 0.0] for _ in range(repeat)] for row in rows} for f in sets}
    texts: dict[tuple[str, int, str], str] = {}
    runs: dict[tuple[str, int, int, str], float] = {}  # (file, rep, prompt, row) -> tok/s
    hung: set[tuple[str, int, str]] = set()  # runs that did not finish within --timeout
    for rep in range(repeat):  # interleaved, so drift in the machine's speed hits every row alike
        for f, prompts in sets.items():
            for i, prompt in enumerate(prompts):
                # The rows take turns at going first: a prompt's first run follows another
                # prompt's last, and no row should always be the one that does.
                turn = (rep * len(prompts) + i) % len(rows)
                for row in rows[turn:] + rows[:turn]:
                    try:
                        if row.startswith("native"):
                            tokens, seconds = native(row, args, target, draft, prompt)
                        else:
                            tokens, seconds, texts[f, i, row] = specrun(
                                row, args, target, draft, prompt, learned
                            )
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
        f"{target} + {Path(draft).name}, {args.tokens} tokens a prompt, greedy, raw prompts, "
        f"{args.threads} threads, median of {repeat} (range)"
    )
    for f, prompts in sets.items():
        rates = {row: [t / s for t, s in totals[f][row]] for row in rows}
        plain = statistics.median(rates["native plain"]) if "native plain" in rows else None
        print(f"\n{f} ({len(prompts)} prompts)")
        for row in rows:
            median = statistics.median(rates[row])
            versus = f"{median / plain:5.2f}x native plain  " if plain else ""
            low, high = min(rates[row]), max(rates[row])
            print(f"  {row:20} {median:6.1f} tok/s  {versus}({low:.1f}-{high:.1f})")
        if plain:  # each run against native plain's on the same prompt, minutes apart at most
            for row in (r for r in rows if r != "native plain"):
                print(f"  {row:20} paired: {paired(runs, f, row)}")
        for row in rows:
            stuck = sorted(i for g, i, r in hung if g == f and r == row)
            if stuck:
                print(
                    f"  {row}: did not finish within {args.timeout:.0f} s on prompts {stuck} "
                    "(left out of its figure)"
                )
        if "specrun gamma 0" in rows:
            for row in (r for r in rows if r.startswith("specrun") and r != "specrun gamma 0"):
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
    return (
        f"{math.exp(mean):.3f}x ({math.exp(mean - half):.3f}-{math.exp(mean + half):.3f}), "
        f"{len(logs)} pairs"
    )


if __name__ == "__main__":
    main()
