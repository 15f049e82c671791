"""Sampling values at the edges of their ranges, through the real server and command line:
none takes the process down, none prints a warning or a traceback, and what is out of range
is refused in one line that names it, the same on both."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.support.cli import specrun
from tests.support.server import Server
from tests.support.tinymodels import vocabulary

COMPLETIONS = "/v1/completions"
PROMPT = "the cat and the dog and the cat and the dog"
DEADLINE = 60  # seconds for one request to the tiny models: a fail-safe, not a measurement


@pytest.fixture(scope="module")
def server(tiny_target: Path, tiny_draft: Path):
    running = Server("-t", str(tiny_target), "-d", str(tiny_draft), "--gamma", "auto")
    yield running
    assert running.stop() == 0


def complete(server: Server, **fields: object) -> httpx.Response:
    body = json.dumps(
        {"prompt": PROMPT, "max_tokens": 24, **fields}
    )  # Infinity as Python writes it
    headers = {"Content-Type": "application/json"}
    return httpx.post(f"{server.url}{COMPLETIONS}", content=body, headers=headers, timeout=DEADLINE)


EXTREMES = [
    {"temperature": 1.0, "repeat_penalty": 1e-300},
    {"temperature": 1.0, "repeat_penalty": 5e-324},
    {"temperature": 1.0, "repeat_penalty": 1e300},
    {"temperature": 0, "repeat_penalty": 1e-300},
    {"temperature": 1e-300, "repeat_penalty": 1.7e308},
    {"temperature": 1e308, "presence_penalty": -2, "frequency_penalty": -2},
    {"temperature": 1.0, "top_p": 1e-300, "min_p": 0.999999},
    {"temperature": 1.0, "top_k": 1, "repeat_penalty": 1e-300, "logit_bias": {"5": -100}},
]


@pytest.mark.parametrize("fields", EXTREMES, ids=lambda fields: str(fields))
def test_extreme_sampling_values_are_answered_and_the_server_stays_up(server, fields):
    """`repeat_penalty: 1e-300` once made a logit infinite, the distribution NaN and the
    sampled id garbage, which llama.cpp aborted the whole server on."""
    for seed in (1, 2):
        answered = complete(server, seed=seed, **fields)
        assert answered.status_code == 200, answered.text
        assert answered.json()["usage"]["completion_tokens"] > 0
    assert complete(server, temperature=0).status_code == 200  # still serving
    said = "".join(server.lines)
    assert "Warning" not in said and "Traceback" not in said, said


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"logit_bias": {"5": 1e308}}, "logit_bias"),
        ({"presence_penalty": -1e308}, "presence_penalty"),
        ({"repeat_penalty": 0}, "repeat_penalty"),
    ],
)
def test_values_out_of_range_are_a_400_naming_the_field(server, fields, param):
    refused = complete(server, **fields)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == param


def test_a_bias_over_the_whole_vocabulary_applies_to_every_token(server, tiny_target):
    """Every token but one pushed down by 100: greedy writes that one, over and over."""
    tokens = vocabulary()[0]
    chosen = tokens.index("▁sea")
    bias = {str(token): (0 if token == chosen else -100) for token in range(len(tokens))}
    answered = complete(server, temperature=0, max_tokens=6, logit_bias=bias)
    assert answered.status_code == 200, answered.text
    assert answered.json()["choices"][0]["text"] == " sea" * 6


def run(tiny_target: Path, *options: str):
    return specrun("run", "-t", str(tiny_target), "--threads", "1", "-n", "16", *options, PROMPT)


def test_the_command_line_samples_with_a_vanishing_repeat_penalty(tiny_target, tiny_draft):
    """Once an abort (exit 134) or a 53-line traceback; now an answer, and no warning. Seeded,
    a text (unseeded, the tiny model may end the answer at its first token: 1 run in 4 did),
    and unseeded, through the accept/reject rule, tokens sampled to the answer's end."""
    for penalty in ("1e-300", "1e300"):
        options = ("-d", str(tiny_draft), "--temp", "1", "--repeat-penalty", penalty)
        ran = run(tiny_target, *options, "--seed", "1")
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() and "Warning" not in ran.stderr, ran.stderr
        ran = run(tiny_target, *options, "--json")
        assert ran.returncode == 0 and "Warning" not in ran.stderr, ran.stderr
        answer = json.loads(ran.stdout)
        assert answer["generated_tokens"] >= 1 and answer["finish_reason"] in ("stop", "length")


@pytest.mark.parametrize(
    "option, field",
    [
        ("--temp", "temperature"),
        ("--top-p", "top_p"),
        ("--min-p", "min_p"),
        ("--repeat-penalty", "repeat_penalty"),
    ],
)
def test_the_command_line_refuses_infinity_as_the_server_does(server, tiny_target, option, field):
    """`--temp inf` was accepted where the server refused it: one check now, in
    SamplingParams, and one line naming the option, as the server's 400 names the field."""
    ran = run(tiny_target, option, "inf")
    assert ran.returncode == 2
    assert ran.stderr.strip() == f"specrun: error: {option} must be a finite number, got inf"
    refused = complete(server, **{field: float("inf")})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == field


def test_a_seed_gives_the_same_answer_whatever_ran_before(server, tiny_target, tiny_draft):
    """Under γ auto the policy's state (what earlier requests taught it, and timings) changes
    the drafts, and once changed the answer of a seeded request. Now a seeded answer is plain
    decoding's with that seed: the same after any other request, and the answer `run` gives
    with that seed at γ 0 and at γ 4 with the draft."""
    seeded = {"temperature": 1.0, "seed": 11, "max_tokens": 48}
    first = complete(server, **seeded).json()["choices"][0]["text"]
    for other in ({"temperature": 0.7, "max_tokens": 64}, {"temperature": 0, "max_tokens": 32}):
        assert complete(server, prompt="the sun and the moon", **other).status_code == 200
        assert complete(server, **seeded).json()["choices"][0]["text"] == first
    options = ("--raw", "--temp", "1", "--seed", "11", "-n", "48", "--json")
    plain = run(tiny_target, *options, "--gamma", "0")
    drafted = run(tiny_target, *options, "-d", str(tiny_draft), "--gamma", "4")
    assert plain.returncode == drafted.returncode == 0, plain.stderr + drafted.stderr
    record = json.loads(drafted.stdout)
    assert json.loads(plain.stdout)["text"] == record["text"] == first
    assert record["drafted"] > 0 and record["accepted"] < record["drafted"]  # some rejected
