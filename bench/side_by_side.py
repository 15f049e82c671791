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
and, drafting from the target's hidden states at a fixed γ (N: --gamma, or the row's own,
as in `specrun eagle3 8`):
  native eagle3 N       llama-speculative-simple --spec-type draft-eagle3 with the head (--head)
  specrun eagle3 N      specrun with the head, --draft eagle3:HEAD --gamma N
  specrun eagle3 auto   specrun with the head, --gamma auto (learned state kept like a user's)
  native mtp plain      llama-completion on the MTP target (--mtp-target)
  native mtp N          llama-speculative-simple --spec-type draft-mtp on it
  specrun mtp plain     specrun on it, no draft
  specrun mtp N         specrun with its MTP layers, --draft mtp --gamma N
With --before CHECKOUT, each specrun row has a `before` row beside it: the same run with that
checkout's code, held against it ("before gamma 0 against specrun gamma 0").
Without --head or --mtp-target, they are written into a scratch folder from the target
(bench/gpu/synthetic.py: its shape and tokenizer, random F16 weights, so acceptance is ~0
and each round yields one token: these rows compare what rounds cost).
The native tools are built from the llama.cpp that the pinned llama-cpp-python vendors,
with specrun's CPU flags (bench/native_compare.sh builds them). Every prompt is sent raw
(a record with "template": "chat" is first written out with the target's chat template),
so every row sees the same tokens. A file's figure is its total
tokens (those of the answer: no row counts the end-of-generation token) over its total
decode seconds, wall time after the prompt (for llama-completion its total time less its
prompt eval time), per repetition; the table gives the median and the range, then each
row run by run against native plain on the same prompt (geometric mean and 95%
interval), and each specrun row against its native peer (`specrun gamma N` against `native
draft`). specrun's `--gamma N` forces a plain round now and then (to measure what plain
decoding costs; with nothing accepted, 15 rounds of 128), native's fixed γ never does:
so each fixed-γ row is also given with those rounds taken out ("γ rounds alone"), run by run
against its peer. Every specrun row's text is checked against `gamma 0`'s, the MTP rows'
against `specrun mtp plain`'s, and MTP rows are paired with `native mtp plain`.

    .venv/bin/python bench/side_by_side.py bench/prompts/mixed.jsonl bench/prompts/heldout.jsonl
    .venv/bin/python bench/side_by_side.py --repeat 4 \\
        --rows "native plain,specrun gamma 0,specrun auto" bench/prompts/mixed.jsonl
    .venv/bin/python bench/side_by_side.py --rows "native plain,specrun gamma 0,native eagle3,\\
        specrun eagle3,native mtp plain,specrun mtp plain,native mtp,specrun mtp" FILE.jsonl
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
from collections import defaultdict
from pathlib import Path

SPECRUN = Path(sys.executable).with_name("specrun")
SYNTHETIC = Path(__file__).resolve().parent / "gpu" / "synthetic.py"
GAMMA_ROUNDS = "γ rounds alone"  # a fixed-γ row without the plain rounds specrun forces
CODES = ("specrun", "before")  # a specrun row's code: this checkout's, or --before's


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
        f"native eagle3 {gamma}",
        f"specrun eagle3 {gamma}",
        "native mtp plain",
        "specrun mtp plain",
        f"native mtp {gamma}",
        f"specrun mtp {gamma}",
    ]


def row_gamma(row: str, args: argparse.Namespace) -> int:
    """A head row's fixed γ: its last word where that is a number, else --gamma."""
    last = row.split()[-1]
    return int(last) if last.isdigit() else args.gamma


def peer(row: str) -> str | None:
    """The native row that does what a specrun row does; for a `before` row, the specrun row
    it ran before the change."""
    if row.startswith("before "):
        return row.replace("before", "specrun", 1)
    if row == "specrun gamma 0":
        return "native plain"
    if row.startswith("specrun gamma "):
        return "native draft"
    if row.startswith(("specrun eagle3", "specrun mtp")):
        return row.replace("specrun", "native", 1)
    return None


def base(row: str, rows: list[str]) -> str:
    """What a row's text and speed are held against: the plain decoding of its own target."""
    mtp = " mtp" in row and "native mtp plain" in rows
    return "native mtp plain" if mtp else "native plain"


def reference(row: str) -> str:
    """The specrun row whose text a specrun row must equal (greedy identity)."""
    mtp = row.startswith(("specrun mtp", "before mtp"))
    return "specrun mtp plain" if mtp else "specrun gamma 0"


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
    parser.add_argument(
        "--before",
        type=Path,
        help="a checkout of specrun from before a change: each specrun row gets a `before` row "
        "beside it, the same run with that checkout's code (PYTHONPATH), held against it",
    )
    parser.add_argument("--target", help="the target GGUF (default: the demo pair's)")
    parser.add_argument("--draft", help="the draft GGUF (default: the demo pair's)")
    parser.add_argument(
        "--head",
        help="the EAGLE-3 head GGUF of the eagle3 rows (default: one written for the target)",
    )
    parser.add_argument(
        "--mtp-target",
        help="the target with MTP layers of the mtp rows (default: one written in the target's "
        "shape, glm4moe)",
    )
    args = parser.parse_args(argv)
    args.rows = args.rows or all_rows(args.gamma)
    if args.before:
        args.rows = [
            twin
            for row in args.rows
            for twin in (
                [row, row.replace("specrun", "before", 1)] if row.startswith("specrun") else [row]
            )
        ]
    return args


def models(args: argparse.Namespace) -> tuple[str, str]:
    target, draft = args.target, args.draft
    if not (target and draft):
        from specrun.models.demo import prepare_demo_pair

        pair = prepare_demo_pair()
        target, draft = target or str(pair[0]), draft or str(pair[1])
    return target, draft


def head_models(args: argparse.Namespace, target: str) -> None:
    """Set args.head and args.mtp_target where rows need them and none was given: written
    from the target's shape and tokenizer into a scratch folder."""
    scratch = None
    for option, flags, wanted in [
        ("head", ["--head", "eagle3"], "eagle3"),
        ("mtp_target", ["--mtp"], " mtp"),
    ]:
        if getattr(args, option) or not any(wanted in row for row in args.rows):
            continue
        scratch = scratch or Path(tempfile.mkdtemp(prefix="side-by-side-heads-"))
        out = scratch / f"{Path(target).stem}-{option.replace('_', '-')}.gguf"
        subprocess.run(
            [sys.executable, str(SYNTHETIC), target, "f16", str(out), *flags],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        setattr(args, option, str(out))


def native(
    row: str, args: argparse.Namespace, target: str, draft: str, prompt: str
) -> tuple[int, float]:
    """(tokens, seconds) of the decode, from the tool's own log."""
    n, threads, gamma = str(args.tokens), str(args.threads), str(args.gamma)
    if " mtp" in row:
        target = args.mtp_target
    common = ["-m", target, "-p", prompt, "-n", n, "--temp", "0", "-t", threads]
    if row in ("native plain", "native mtp plain"):
        log = _logged(
            [str(args.native_bin / "llama-completion"), *common, "-no-cnv"],
            args.timeout,
            "common_perf_print:    graphs reused",  # its last line
        )
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
    if row == "native draft" or row.startswith(("native eagle3", "native mtp")):
        if row.startswith("native eagle3"):
            kind = ["-md", args.head, "--spec-type", "draft-eagle3"]
        elif row.startswith("native mtp"):
            kind = ["--spec-type", "draft-mtp"]
        else:
            kind = ["-md", draft, "--spec-type", "draft-simple"]
        if row != "native draft":
            gamma = str(row_gamma(row, args))
        # n_min = n_max and p_min 0: every round drafts γ tokens, as specrun's fixed γ does.
        kind += ["--spec-draft-n-max", gamma, "--spec-draft-n-min", gamma]
        kind += ["--spec-draft-p-min", "0"]
    else:
        kind = ["--spec-type", row.split()[-1]]
    log = _logged(
        [str(args.native_bin / "llama-speculative-simple"), *common, *kind],
        args.timeout,
        "decoded ",
    )
    tokens, seconds = re.findall(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", log)[-1]
    # It runs past --tokens unless the answer ends, and then its count includes the
    # end-of-generation token.
    return int(tokens) if int(tokens) > args.tokens else int(tokens) - 1, float(seconds)


def specrun(
    row: str, args: argparse.Namespace, target: str, draft: str, prompt: str, learned: str
) -> tuple[int, float, str, float | None]:
    """(tokens, seconds, text, rate of its γ rounds alone) of `specrun run`; `auto` and
    `lookup` keep their learned state in `learned` across runs, `auto fresh` starts from
    none."""
    mode = row.removeprefix("specrun ").removeprefix("before ")
    code = {"PYTHONPATH": str(args.before)} if row.startswith("before ") else {}
    if mode == "lookup":
        drafting = ["--draft", "lookup"]
    elif mode == "mtp plain":
        target, drafting = args.mtp_target, ["--draft", "none", "--gamma", "0"]
    elif mode.startswith("mtp"):
        target, drafting = args.mtp_target, ["--draft", "mtp", "--gamma", str(row_gamma(row, args))]
    elif mode == "eagle3 auto":
        drafting = ["--draft", f"eagle3:{args.head}", "--gamma", "auto"]
    elif mode.startswith("eagle3"):
        drafting = ["--draft", f"eagle3:{args.head}", "--gamma", str(row_gamma(row, args))]
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
        stderr=subprocess.PIPE,
        env=os.environ | {"XDG_STATE_HOME": state} | code,
    )
    result = json.loads(out)
    fixed = mode != "mtp plain" and row_gamma(row, args) > 0 and "auto" not in mode
    rate = gamma_rounds_rate(result) if fixed and mode != "lookup" else None
    DRAFTING[row].append(result)
    return result["generated_tokens"], result["decode_seconds"], result["text"], rate


DRAFTING: dict[str, list[dict]] = defaultdict(list)  # each specrun row's --json results


def drafting_figures(row: str) -> str | None:
    """A drafting row's acceptance over all its runs: the share of drafts accepted, the
    tokens a round committed, and per draft position the share accepted where drafted."""
    results = [r for r in DRAFTING[row] if r["drafted"]]
    if not results:
        return None
    drafted, accepted = sum(r["drafted"] for r in results), sum(r["accepted"] for r in results)
    rounds = sum(r["rounds"] for r in results)
    tokens = sum(r["generated_tokens"] for r in results)
    positions = max(len(r["per_position_acceptance"]) for r in results)
    by_position = [
        statistics.mean(
            r["per_position_acceptance"][k]
            for r in results
            if len(r["per_position_acceptance"]) > k
        )
        for k in range(positions)
    ]
    return (
        f"acceptance {accepted / drafted:.2f}, {tokens / rounds:.2f} tokens a round, mean γ "
        f"{statistics.mean(r['mean_gamma'] for r in results):.2f}, by position "
        + " ".join(f"{a:.2f}" for a in by_position)
    )


def gamma_rounds_rate(result: dict) -> float | None:
    """tok/s of a fixed-γ run without the plain rounds specrun forces now and then to measure
    a plain token (gamma.PlainSamples; with nothing accepted, 15 rounds of 128): each taken
    out at the run's own mean cost of a plain round (its width-1 verify and overhead).
    The zeros that end the trace are where the token limit left no room, as in native's."""
    trace = result["gamma_trace"][1:]  # the first round's token came from the prompt's pass
    tail = len(trace) - len("".join(map(str, trace)).rstrip("0"))
    forced = trace[: len(trace) - tail].count(0)
    width_1 = result["verify_seconds_by_width"].get("1")
    if not forced:
        return result["tokens_per_second"]
    if width_1 is None:
        return None
    plain = width_1 + result["overhead_seconds_per_round"]
    return (result["generated_tokens"] - forced) / (result["decode_seconds"] - forced * plain)


def _logged(cmd: list[str], timeout: float, last: str) -> str:
    """A native tool's log, run again (three times at most) where it lacks `last`: llama.cpp
    logs from a worker thread, and on a busy machine the last lines are sometimes lost at exit."""
    for _ in range(2):
        log = _run(cmd, timeout)
        if last in log:
            return log
    return _run(cmd, timeout)


def _run(
    cmd: list[str], timeout: float, stderr: int = subprocess.STDOUT, env: dict | None = None
) -> str:
    """The command's output; a failure raises CalledProcessError with its stderr."""
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


def prompt_texts(path: str, target: str) -> list[str]:
    """A file's prompts as raw text: a record with "template": "chat" is one user turn,
    written out with the target's chat template (its markup as text, which every row's raw
    prompt turns back into the same tokens)."""
    records = [json.loads(line) for line in open(path) if line.strip()]
    if all(r.get("template", "raw") == "raw" for r in records):
        return [r["prompt"] for r in records]
    from specrun.llama.model import Model
    from specrun.prompt import Message, chat_text

    model = Model(target, n_ctx=256, threads=1)
    try:
        return [
            chat_text(model, [Message("user", r["prompt"])])
            if r.get("template", "raw") == "chat"
            else r["prompt"]
            for r in records
        ]
    finally:
        model.close()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rows, repeat = args.rows, args.repeat
    target, draft = models(args)
    head_models(args, target)
    # The `auto` rows' learned state, one folder for each code (a `before` row's its own).
    learned = {code: tempfile.mkdtemp(prefix="side-by-side-state-") for code in CODES}
    sets = {f: prompt_texts(f, target) for f in args.files}
    # What a user's `auto` would know: one earlier run, on a prompt of none of the sets.
    for row in ("specrun auto", "before auto"):
        if row in rows:
            specrun(
                row,
                args,
                target,
                draft,
                "Once upon a time, in a small village by the sea, there lived",
                learned[row.split()[0]],
            )
    # totals[file][row][rep] = [tokens, seconds]
    totals = {f: {row: [[0, 0.0] for _ in range(repeat)] for row in rows} for f in sets}
    texts: dict[tuple[str, int, str], str] = {}
    runs: dict[tuple[str, int, int, str], float] = {}  # (file, rep, prompt, row) -> tok/s
    hung: set[tuple[str, int, str]] = set()  # runs that did not finish within --timeout
    failed: dict[tuple[str, int, str], str] = {}  # runs that failed: the last line they wrote
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
                            tokens, seconds, texts[f, i, row], rounds = specrun(
                                row, args, target, draft, prompt, learned[row.split()[0]]
                            )
                            if rounds is not None:
                                runs[f, rep, i, f"{row} {GAMMA_ROUNDS}"] = rounds
                    except subprocess.TimeoutExpired:
                        hung.add((f, i, row))
                        continue
                    except subprocess.CalledProcessError as error:
                        lines = (error.stderr or error.stdout or "").strip().splitlines()
                        failed[f, i, row] = lines[-1] if lines else f"exit {error.returncode}"
                        print(
                            f"{rep} {Path(f).name}:{i} {row}: {failed[f, i, row]}", file=sys.stderr
                        )
                        continue
                    totals[f][row][rep][0] += tokens
                    totals[f][row][rep][1] += seconds
                    runs[f, rep, i, row] = tokens / seconds
                    print(
                        f"{rep} {Path(f).name}:{i} {row}: {tokens / seconds:.1f} tok/s",
                        file=sys.stderr,
                        flush=True,
                    )
    heads = [f"head {args.head}"] if args.head else []
    heads += [f"MTP target {args.mtp_target}"] if args.mtp_target else []
    print(
        f"{target} + {Path(draft).name}, {args.tokens} tokens a prompt, greedy, raw prompts, "
        f"{args.threads} threads, median of {repeat} (range)"
    )
    if heads:
        print("; ".join(heads))
    for f, prompts in sets.items():
        rates = {row: [t / s for t, s in totals[f][row]] for row in rows}
        print(f"\n{f} ({len(prompts)} prompts)")
        for row in rows:
            median = statistics.median(rates[row])
            plain = base(row, rows)
            versus = (
                f"{median / statistics.median(rates[plain]):5.2f}x {plain:17}"
                if plain in rows
                else ""
            )
            low, high = min(rates[row]), max(rates[row])
            print(f"  {row:20} {median:6.1f} tok/s  {versus}({low:.1f}-{high:.1f})")
        # each run against its plain row's on the same prompt, minutes apart at most
        for row in (r for r in rows if base(r, rows) in rows and r != base(r, rows)):
            print(f"  {row:20} paired: {paired(runs, f, row, base(row, rows))}")
        for row in (r for r in rows if peer(r) in rows and peer(r) != base(r, rows)):
            print(f"  {row:20} against {peer(row)}: {paired(runs, f, row, peer(row))}")
        gamma_rounds(runs, f, rows)
        for row in rows:
            stuck = sorted(i for g, i, r in hung if g == f and r == row)
            if stuck:
                print(
                    f"  {row}: did not finish within {args.timeout:.0f} s on prompts {stuck} "
                    "(left out of its figure)"
                )
            broken = {i: line for (g, i, r), line in failed.items() if g == f and r == row}
            if broken:
                print(f"  {row}: failed on prompts {sorted(broken)} (left out): {broken}")
        for row in (r for r in rows if r.startswith(CODES) and r != reference(r)):
            if reference(row) not in rows:
                print(f"  {row}: text not checked (no `{reference(row)}` row)")
                continue
            differ = [
                i
                for i in range(len(prompts))
                if (f, i, row) in texts and texts[f, i, row] != texts.get((f, i, reference(row)))
            ]
            if differ:
                print(f"  {row}: text differs from {reference(row)} on prompts {differ}")
    figures = {row: drafting_figures(row) for row in rows}
    if any(figures.values()):
        print("\ndrafting, every file and repetition:")
        for row, line in figures.items():
            if line is not None:
                print(f"  {row:20} {line}")


def gamma_rounds(runs: dict[tuple[str, int, int, str], float], f: str, rows: list[str]) -> None:
    """specrun's fixed-γ rows without the plain rounds it forces (gamma_rounds_rate), against
    their native peers, which never force one: what the same γ's rounds cost."""
    for row in rows:
        rates = [
            rate for (g, _, _, r), rate in runs.items() if g == f and r == f"{row} {GAMMA_ROUNDS}"
        ]
        if not rates:
            continue
        against = peer(row)
        versus = (
            f"; against {against}: {paired(runs, f, f'{row} {GAMMA_ROUNDS}', against)}"
            if against in rows
            else ""
        )
        print(f"  {row:20} {GAMMA_ROUNDS}: {statistics.median(rates):.1f} tok/s{versus}")


def paired(
    runs: dict[tuple[str, int, int, str], float], f: str, row: str, other: str = "native plain"
) -> str:
    """The geometric mean of a row's tok/s over another's (native plain's), run by run on the
    same prompt and repetition, with a 95% interval: single runs here move by 10%, their
    ratios less."""
    logs = [
        math.log(rate / runs[g, rep, i, other])
        for (g, rep, i, r), rate in runs.items()
        if g == f and r == row and (g, rep, i, other) in runs
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
