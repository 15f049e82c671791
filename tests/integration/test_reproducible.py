"""--reproducible: greedy output byte-identical at any γ, and a position's logits the same
in a batch as alone; near ties counted in the figures."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specrun.core import sampling
from specrun.core.loop import Round
from specrun.core.sampling import NEAR_TIE, SamplingParams, greedy_choice, verify_greedy
from specrun.core.stats import Stats
from specrun.engine import Engine
from specrun.llama.model import Model
from specrun.options import DraftOptions, LoadOptions
from tests.support.cli import specrun

GREEDY = SamplingParams(temperature=0)
GAMMAS = ("0", "1", "4", "auto")
REPRODUCIBLE = LoadOptions(n_ctx=512, threads=1, reproducible=True)


@pytest.fixture(scope="module", params=["tiny", "smollm2"])
def pair(request):
    if request.param == "tiny":
        return request.getfixturevalue("tiny_target"), request.getfixturevalue("tiny_draft")
    return request.getfixturevalue("demo_pair")


def generation(
    engine: Engine, gamma: str, prompt: list[int], max_tokens: int
) -> tuple[list[int], str]:
    engine.set_gamma(gamma)
    rounds = [e for e in engine.stream(prompt, max_tokens=max_tokens) if isinstance(e, Round)]
    return [t for r in rounds for t in r.tokens], "".join(r.text for r in rounds)


def test_greedy_output_is_byte_identical_at_every_gamma(pair):
    """One engine, every γ, two turns: the second reuses the cache the first left behind."""
    target, draft = pair
    with Engine.load(
        target, draft, options=REPRODUCIBLE, params=GREEDY, drafting=DraftOptions(gamma="4")
    ) as engine:
        assert engine.target.invariance is not None
        for text in (
            "Write a short poem about the sea.",
            "List three prime numbers and explain why.",
        ):
            first = engine.prompt(text)
            outputs = {}
            for gamma in GAMMAS:
                tokens, answer = generation(engine, gamma, first, 48)
                follow_up = first + tokens + engine.target.tokenize(" And then?", add_special=False)
                outputs[gamma] = (
                    tokens,
                    answer.encode(),
                    generation(engine, gamma, follow_up, 24)[1].encode(),
                )
            assert outputs["0"][0], "nothing generated"
            for gamma in GAMMAS[1:]:
                assert outputs[gamma] == outputs["0"], f"γ={gamma} differs from plain decoding"


def test_serial_verify_is_plain_decoding_at_every_gamma(pair):
    """The fallback where no batch agrees with a lone position, forced: verifying one
    position per pass gives plain decoding's output (without --reproducible) at every γ."""
    target, draft = pair
    prompt_text = "Write a short poem about the sea."
    with Engine.load(
        target,
        options=LoadOptions(n_ctx=512, threads=1),
        params=GREEDY,
        drafting=DraftOptions(gamma="0"),
    ) as plain:
        expected = generation(plain, "0", plain.prompt(prompt_text), 48)
    with Engine.load(
        target, draft, options=LoadOptions(n_ctx=512, threads=1), params=GREEDY
    ) as engine:
        engine.target.max_width = 1  # what the load-time check sets for "serial"
        for gamma in GAMMAS[1:]:
            assert generation(engine, gamma, engine.prompt(prompt_text), 48) == expected, (
                f"γ={gamma}"
            )


def test_reproducible_logits_do_not_depend_on_the_batch(pair):
    """What the load-time check promises: each position's logits, verified in one batch,
    are bit for bit those of plain decoding, one position per pass."""
    target, _ = pair
    with Model(target, n_ctx=256, threads=1, reproducible=True) as model:
        sequence = model.tokenize("The quick brown fox jumps over the lazy dog, and then it runs")
        batch = model.logits(sequence, 5)
        model.reset()
        model.logits(sequence[:-5], 0)
        plain = np.concatenate(
            [model.logits(sequence[:n], 1) for n in range(len(sequence) - 4, len(sequence) + 1)]
        )
        assert np.array_equal(batch, plain), model.invariance


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_near_ties_count_rows_whose_top_two_are_close(compiled, monkeypatch):
    if not compiled:
        monkeypatch.setattr(sampling, "_compiled", None)
    rows = np.zeros((5, 10), dtype=np.float32)
    rows[0, 3], rows[0, 7] = 5.0, 5.0 - NEAR_TIE / 2  # a near tie
    rows[1, 0], rows[1, 9] = 5.0, 5.0 - 2 * NEAR_TIE  # not one
    rows[2, 9] = 5.0  # the best at the end, all others equal
    rows[3, [2, 6, 8]] = 5.0  # an exact tie: the first, as numpy's argmax, at no gap
    rows[4] = np.arange(10)[::-1]  # the best at the start
    choices = [greedy_choice(row) for row in rows]
    assert [best for best, _ in choices] == list(rows.argmax(axis=1))
    np.testing.assert_allclose(
        [gap for _, gap in choices], [NEAR_TIE / 2, 2 * NEAR_TIE, 5.0, 0.0, 1.0], rtol=1e-5
    )
    flipped = rows[:, ::-1].copy()
    assert [best for best, _ in map(greedy_choice, flipped)] == list(flipped.argmax(axis=1))
    # Greedy verification checks the rows it reads, one per committed token, and no more.
    assert verify_greedy(rows[:3], [3, 0]) == (2, 9, [True, False, False])
    assert verify_greedy(rows[:3], [3, 5]) == (1, 0, [True, False])


def test_near_ties_reach_the_figures(tiny_target, tiny_draft):
    with Engine.load(
        tiny_target, tiny_draft, options=LoadOptions(threads=1), params=GREEDY
    ) as engine:
        stats = Stats()
        for event in engine.stream("the sea", max_tokens=32):
            stats.add(event)
        assert 0 <= stats.near_ties <= stats.generated
        assert stats.as_dict()["near_ties"] == stats.near_ties
        engine.set_params(temperature=0.8, seed=1)
        sampled = [e for e in engine.stream("the sea", max_tokens=16) if isinstance(e, Round)]
        assert all(r.near_ties == 0 for r in sampled)  # counted for greedy choices only


def test_run_reproducible_says_how_and_reports_it(tiny_target, tiny_draft):
    common = [
        "run",
        "-t",
        str(tiny_target),
        "-d",
        str(tiny_draft),
        "--temp",
        "0",
        "-n",
        "16",
        "--threads",
        "1",
        "--reproducible",
        "the sea",
    ]
    answers = {gamma: specrun(*common, "--gamma", gamma) for gamma in ("0", "3")}
    assert answers["0"].returncode == answers["3"].returncode == 0, answers["3"].stderr
    assert answers["0"].stdout == answers["3"].stdout and answers["0"].stdout.strip()
    assert "--reproducible: " in answers["3"].stderr
    record = json.loads(specrun(*common, "--json").stdout)
    assert record["reproducible"] in ("batch", "padded", "chunked", "serial")
    assert record["near_ties"] >= 0 and record["near_tie_epsilon"] == NEAR_TIE
    assert record["text"] == answers["0"].stdout.rstrip("\n")


def test_serve_reproducible_answers_as_plain_decoding_does(tiny_target, tiny_draft):
    from tests.support.server import Server, chat

    plain = json.loads(
        specrun(
            "run",
            "-t",
            str(tiny_target),
            "--reproducible",
            "--gamma",
            "0",
            "--temp",
            "0",
            "-n",
            "24",
            "--threads",
            "1",
            "--json",
            "the sea",
        ).stdout
    )
    server = Server("-t", str(tiny_target), "-d", str(tiny_draft), "--reproducible", "--gamma", "3")
    try:
        assert server.stats()["reproducible"] == plain["reproducible"]
        for _ in range(2):  # the second request reuses the cache the first left
            response = chat(server, "the sea", temperature=0, max_tokens=24)
            assert response.choices[0].message.content == plain["text"]
            assert response.model_extra["specrun"]["drafted"] > 0
    finally:
        assert server.stop() == 0
