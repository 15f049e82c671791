"""Prompt lookup beside llama.cpp's own n-gram drafts, over prompt files, interleaved.

Rows: native plain (llama-completion), native ngram-simple and ngram-mod
(llama-speculative-simple, no draft model), specrun --gamma 0 and specrun --draft lookup.
Every prompt is sent raw (no chat template), so all five see the same tokens. A file's
figure is its total tokens over its total decode seconds, per repetition; the table
gives the median and the range. specrun lookup's text is checked against --gamma 0's.

    .venv/bin/python bench/lookup_compare.py bench/prompts/extraction.jsonl bench/prompts/mixed.jsonl
Env: REPEAT (3), TOKENS (128), THREADS (2), NATIVE_BIN (/tmp/specrun-native/build/bin, where
bench/native_compare.sh builds the native tools), TARGET (default: the demo pair's target).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPEAT = int(os.environ.get("REPEAT", 3))
TOKENS = int(os.environ.get("TOKENS", 128))
THREADS = os.environ.get("THREADS", "2")
BIN = Path(os.environ.get("NATIVE_BIN", "/tmp/specrun-native/build/bin"))
SPECRUN = Path(sys.executable).with_name("specrun")
ROWS = ["native plain", "native ngram-simple", "native ngram-mod", "specrun --gamma 0", "specrun lookup"]


def target() -> str:
    if "TARGET" in os.environ:
        return os.environ["TARGET"]
    from specrun.demo import prepare_demo_pair
    return str(prepare_demo_pair()[0])


def native(row: str, model: str, prompt: str) -> tuple[int, float]:
    """(tokens, seconds) of the decode, from the tool's own log."""
    common = ["-m", model, "-p", prompt, "-n", str(TOKENS), "--temp", "0", "-t", THREADS]
    if row == "native plain":
        log = _run([str(BIN / "llama-completion"), *common, "-no-cnv"])
        ms, runs = re.findall(r" eval time =\s*([\d.]+) ms /\s*(\d+) runs", log)[-1]
        return int(runs), float(ms) / 1000
    log = _run([str(BIN / "llama-speculative-simple"), *common, "--spec-type", row.split()[-1]])
    tokens, seconds = re.findall(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", log)[-1]
    return int(tokens), float(seconds)


def specrun(row: str, model: str, prompt: str) -> tuple[int, float, str]:
    draft = ["--draft", "lookup"] if row == "specrun lookup" else ["--gamma", "0"]
    out = _run([str(SPECRUN), "run", "-t", model, *draft, "--raw", "--temp", "0", "-n", str(TOKENS),
                "--threads", THREADS, "--json", prompt], stderr=subprocess.DEVNULL)
    result = json.loads(out)
    return result["generated_tokens"], result["decode_seconds"], result["text"]


def _run(cmd: list[str], stderr: int = subprocess.STDOUT) -> str:
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, check=True).stdout


def main(files: list[str]) -> None:
    model = target()
    sets = {f: [json.loads(line)["prompt"] for line in open(f) if line.strip()] for f in files}
    # totals[file][row][rep] = [tokens, seconds]
    totals = {f: {row: [[0, 0.0] for _ in range(REPEAT)] for row in ROWS} for f in files}
    texts: dict[tuple[str, int, str], str] = {}
    for rep in range(REPEAT):  # interleaved, so drift in the machine's speed hits every row alike
        for f, prompts in sets.items():
            for i, prompt in enumerate(prompts):
                for row in ROWS:
                    if row.startswith("native"):
                        tokens, seconds = native(row, model, prompt)
                    else:
                        tokens, seconds, texts[f, i, row] = specrun(row, model, prompt)
                    totals[f][row][rep][0] += tokens
                    totals[f][row][rep][1] += seconds
    print(f"{model}, {TOKENS} tokens a prompt, greedy, raw prompts, {THREADS} threads, median of {REPEAT} (range)")
    for f, prompts in sets.items():
        rates = {row: [t / s for t, s in totals[f][row]] for row in ROWS}
        plain = statistics.median(rates["native plain"])
        print(f"\n{f} ({len(prompts)} prompts)")
        for row in ROWS:
            median = statistics.median(rates[row])
            print(f"  {row:22} {median:6.1f} tok/s  {median / plain:5.2f}x native plain  "
                  f"({min(rates[row]):.1f}-{max(rates[row]):.1f})")
        differ = [i for i in range(len(prompts)) if texts[f, i, "specrun lookup"] != texts[f, i, "specrun --gamma 0"]]
        print(f"  lookup text == --gamma 0 text: {'all prompts' if not differ else f'not on prompts {differ}'}")


if __name__ == "__main__":
    main(sys.argv[1:])
