"""Suffix drafts through the engine: exact (greedy identical to plain decoding, sampled output
distributed as the target's), and learning across requests: a request drafts from earlier
answers of its tenant, in any slot, and never from another tenant's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specrun.cli.options import ModelRequest
from specrun.core.loop import Round
from specrun.core.sampling import SamplingParams, probabilities
from specrun.engine import Engine
from specrun.errors import OptionError, SpecrunError
from specrun.llama.model import Model
from specrun.options import PROMPT_LOOKUP, SUFFIX, DraftOptions, LoadOptions
from specrun.prompt import prompt_tokens
from tests.support.cli import specrun
from tests.support.distribution import assert_distributed, first_marginals
from tests.support.identity import GREEDY, assert_greedy_identical, committed, greedy_tokens
from tests.support.threads import in_threads

PROMPT = "the cat and the dog in the big red road"
EDITED = "the cat and a dog in the big red road"
SAMPLED = SamplingParams(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
DRAWS = 1200


def load(target, draft=SUFFIX, gamma="4", parallel=1) -> Engine:
    return Engine.load(
        target,
        draft,
        options=LoadOptions(n_ctx=512, parallel=parallel, threads=1),
        drafting=DraftOptions(gamma=gamma),
    )


def rounds_of(engine: Engine, prompt: list[int], max_tokens: int = 60, **keywords) -> list[Round]:
    events = engine.stream(prompt, max_tokens=max_tokens, params=GREEDY, **keywords)
    return [event for event in events if isinstance(event, Round)]


def tokens_of(rounds: list[Round]) -> list[int]:
    return [token for r in rounds for token in r.tokens]


def drafted(rounds: list[Round]) -> int:
    return sum(r.drafted for r in rounds)


def test_a_repeated_request_drafts_from_the_first_answer_and_stays_exact(tiny_target):
    """The same request twice, then an edited one: each greedy identical to plain decoding;
    the second drafts more than the first (the first's answer is in the store) in fewer
    rounds, and its drafts are accepted."""
    with load(tiny_target) as engine, Model(tiny_target, n_ctx=512) as alone:
        prompts = [alone.tokenize(text) for text in (PROMPT, PROMPT, EDITED)]
        runs = [rounds_of(engine, prompt) for prompt in prompts]
        for prompt, rounds in zip(prompts, runs):
            plain, _ = greedy_tokens(alone, prompt, max_tokens=60)
            assert assert_greedy_identical(alone, prompt, plain, tokens_of(rounds), 1e-3) == (
                "identical"
            )
        first, second, _ = runs
        assert drafted(second) > drafted(first) and len(second) < len(first)
        assert sum(r.accepted for r in second) > sum(r.accepted for r in first)
        assert engine.suffix_store is not None
        assert engine.suffix_store.answers() == [tokens_of(rounds) for rounds in runs]


def test_tenants_draft_from_their_own_answers_only(tiny_target):
    """A tenant's second request drafts from its first answer; another tenant's first request
    (and the default tenant's) drafts round for round as the very first did."""
    with load(tiny_target) as engine:
        prompt = engine.target.tokenize(PROMPT)
        first = rounds_of(engine, prompt, tenant="alice")
        again = rounds_of(engine, prompt, tenant="alice")
        assert drafted(again) > drafted(first)
        for tenant in ("bob", None):
            other = rounds_of(engine, prompt, tenant=tenant)
            assert [r.drafted for r in other] == [r.drafted for r in first]
            assert tokens_of(other) == tokens_of(first)
        assert engine.suffix_store is not None
        assert engine.suffix_store.answers("alice") == [tokens_of(first)] * 2


def test_two_turns_stay_exact(tiny_target):
    """A chat's second turn extends the first's text (the source indexes only what is new) and
    finds the first answer in the store as well."""
    with load(tiny_target) as engine, Model(tiny_target, n_ctx=512) as alone:
        first_prompt = alone.tokenize("the sun is big and the sea")
        first = tokens_of(rounds_of(engine, first_prompt, max_tokens=40))
        second_prompt = [*first_prompt, *first, *alone.tokenize(" and the moon is small")]
        rounds = rounds_of(engine, second_prompt, max_tokens=40)
        for prompt, answer in ((first_prompt, first), (second_prompt, tokens_of(rounds))):
            plain, _ = greedy_tokens(alone, prompt, max_tokens=40)
            assert assert_greedy_identical(alone, prompt, plain, answer, 1e-3) == "identical"
        assert sum(r.accepted for r in rounds) > 0


def test_sampled_suffix_drafts_follow_the_targets_distribution(tiny_target):
    """The first three tokens of many sampled answers against the marginals of the target's own
    distribution, by a χ² test per position. The prompt ends with the start of an answer in
    the store, so the rounds draft its continuation: accepted where the target's draw follows
    it, rejected elsewhere (and every answer joins the store too, which stays exact: a draft
    depends on earlier answers, never on this round's draws)."""
    with load(tiny_target, gamma="3") as engine:
        earlier = tokens_of(rounds_of(engine, engine.target.tokenize("the sun is big"), 40))
        prompt = [*engine.target.tokenize(PROMPT), *earlier[:6]]
        counts = np.zeros((3, engine.target.n_vocab))
        rounds: list[Round] = []
        for draw in range(DRAWS):
            events = list(
                engine.stream(prompt, max_tokens=3, params=SAMPLED, rng=np.random.default_rng(draw))
            )
            for position, token in enumerate(committed(events)):
                counts[position, token] += 1
            rounds += [e for e in events if isinstance(e, Round)]
        assert 0 < sum(r.accepted for r in rounds) < drafted(rounds)
    with Model(tiny_target, n_ctx=256) as alone:

        def after(history: list[int]) -> np.ndarray:
            return probabilities(alone.logits(history, 1)[0], SAMPLED)

        for position, expected in enumerate(first_marginals(after, prompt, 3)):
            assert_distributed(counts[position], expected)


def test_slots_share_the_store_and_stay_exact(tiny_target):
    """Two slots: a request in one, then the same request in both at once (two threads): each
    greedy identical to plain decoding, and each drafts more than the first did, the slot that
    never saw the request too, from the store every slot's source shares."""
    with load(tiny_target, parallel=2) as engine, Model(tiny_target, n_ctx=512) as alone:
        prompt = alone.tokenize(PROMPT)
        plain, _ = greedy_tokens(alone, prompt, max_tokens=60)
        first = rounds_of(engine, prompt)
        both = in_threads([lambda: rounds_of(engine, prompt), lambda: rounds_of(engine, prompt)])
        for rounds in (first, *both):
            assert assert_greedy_identical(alone, prompt, plain, tokens_of(rounds), 1e-3) == (
                "identical"
            )
        assert all(drafted(rounds) > drafted(first) for rounds in both)
        assert engine.suffix_store is not None and len(engine.suffix_store.answers()) == 3


def test_the_hybrid_asks_suffix_drafts_first_and_stays_exact(tiny_target, tiny_draft):
    """`-d suffix,MODEL`: suffix drafts as the hybrid's free source, auto choosing per round;
    greedy identical twice, the answers kept for later requests."""
    with load(tiny_target, [SUFFIX, tiny_draft], gamma="auto") as engine:
        assert engine.draft is not None and engine.draft.name.startswith("suffix+")
        prompt = engine.target.tokenize(EDITED)
        runs = [tokens_of(rounds_of(engine, prompt)) for _ in range(2)]
        with Model(tiny_target, n_ctx=512) as alone:
            plain, _ = greedy_tokens(alone, prompt, max_tokens=60)
            for answer in runs:
                assert assert_greedy_identical(alone, prompt, plain, answer, 1e-3) == "identical"
        assert engine.suffix_store is not None and engine.suffix_store.answers() == runs


def test_lookup_beside_suffix_drafts_is_refused(tiny_target):
    with pytest.raises(OptionError, match="give `suffix` or `lookup`, not both"):
        Engine.load(tiny_target, [PROMPT_LOOKUP, SUFFIX])


def test_the_command_line_names_suffix_drafts(tiny_target, tiny_draft):
    """`--draft suffix` alone or in the hybrid; `specrun run -d suffix` answers as plain
    decoding does, and `-d lookup,suffix` is refused in one line."""
    assert ModelRequest(str(tiny_target), "suffix", None).resolve().draft == SUFFIX
    hybrid = ModelRequest(str(tiny_target), f"suffix,{tiny_draft}", None).resolve()
    assert hybrid.drafts == (SUFFIX, tiny_draft) and hybrid.draft_spec == f"suffix,{tiny_draft}"
    run = ["run", "-t", str(tiny_target), "--raw", "--temp", "0", "-n", "40", PROMPT]
    suffix, plain = specrun(*run, "-d", "suffix"), specrun(*run, "-g", "0")
    assert suffix.returncode == 0 and suffix.stdout == plain.stdout != ""
    refused = specrun(*run, "-d", "lookup,suffix")
    assert refused.returncode == 2 and refused.stdout == "", refused.stderr  # an option error
    assert refused.stderr.splitlines() == [
        "specrun: error: suffix drafts match the request's own text as prompt lookup does: "
        "give `suffix` or `lookup`, not both"
    ]


def test_the_demo_model_drafts_a_second_extraction_from_the_first(demo_pair):
    """An agent's pattern: the same extraction for another record. The second answer repeats
    the first one's keys and layout, which the store offers: it drafts more, in fewer rounds,
    and both answers are the target's own."""
    target_path, _ = demo_pair
    template = (
        "Extract the person as JSON with the keys name, age, city and email:\n"
        "{} is {} years old, lives in {} and writes to {}."
    )
    records = [
        ("Alice Martin", 30, "Paris", "alice@example.com"),
        ("Bob Stone", 41, "Rome", "bob@example.org"),
    ]
    with load(target_path) as engine, Model(target_path, n_ctx=512) as alone:
        prompts = [prompt_tokens(alone, template.format(*record)) for record in records]
        runs = [rounds_of(engine, prompt, max_tokens=48) for prompt in prompts]
        for prompt, rounds in zip(prompts, runs):
            plain, _ = greedy_tokens(alone, prompt, max_tokens=48)
            assert_greedy_identical(alone, prompt, plain, tokens_of(rounds), epsilon=0.05)
        first, second = runs  # 37 rounds, 4 drafts accepted; then 24 rounds, 15 accepted
        assert sum(r.accepted for r in second) > 2 * sum(r.accepted for r in first)
        assert len(second) < 0.8 * len(first)


def test_a_kept_store_carries_answers_to_the_next_engine(tiny_target, tmp_path):
    """The first engine's answers, kept at close, are what the next one drafts from in its
    first request, its tenants kept apart; output stays plain decoding's."""
    kept = tmp_path / "store.json"
    drafting = DraftOptions(gamma="4", suffix_file=kept)
    options = LoadOptions(n_ctx=512, threads=1)
    with Engine.load(tiny_target, SUFFIX, options=options, drafting=drafting) as first:
        prompt = first.target.tokenize(PROMPT)
        fresh = rounds_of(first, prompt, tenant="alice")
    assert kept.stat().st_mode & 0o777 == 0o600
    with Engine.load(tiny_target, SUFFIX, options=options, drafting=drafting) as second:
        assert second.suffix_store is not None
        assert second.suffix_store.answers("alice") == [tokens_of(fresh)]
        assert second.suffix_store.answers() == []  # another tenant's answers stay its own
        again = rounds_of(second, prompt, tenant="alice")
        other = rounds_of(second, prompt, tenant="bob")
    assert tokens_of(again) == tokens_of(fresh) == tokens_of(other)
    assert drafted(again) > drafted(fresh) and [r.drafted for r in other] == [
        r.drafted for r in fresh
    ]


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("not json", "is not JSON"),
        ('{"version": 2, "vocabulary": "x", "answers": []}', "version"),
        ('{"version": 1, "vocabulary": "x", "answers": [{"tokens": [1]}]}', "tenant"),
        ('{"version": 1, "vocabulary": "x", "answers": []}', "another vocabulary"),
    ],
)
def test_a_damaged_or_foreign_store_is_one_line_before_any_generation(
    tiny_target, tmp_path, content, said
):
    kept = tmp_path / "store.json"
    kept.write_text(content)
    drafting = DraftOptions(gamma="4", suffix_file=kept)
    with pytest.raises(SpecrunError, match=said) as refused:
        Engine.load(tiny_target, SUFFIX, options=LoadOptions(n_ctx=512), drafting=drafting)
    assert str(kept) in str(refused.value) and "\n" not in str(refused.value)
    assert kept.read_text() == content  # a refused file is left as it was


def test_a_store_of_tokens_outside_the_vocabulary_is_refused(tiny_target, tmp_path):
    from specrun.suffix_file import vocabulary_digest

    with Model(tiny_target, n_ctx=64) as model:
        digest = vocabulary_digest(model)
        beyond = model.n_vocab
    kept = tmp_path / "store.json"
    answer = {"tenant": None, "tokens": [1, 2, beyond]}
    kept.write_text(json.dumps({"version": 1, "vocabulary": digest, "answers": [answer]}))
    drafting = DraftOptions(gamma="4", suffix_file=kept)
    with pytest.raises(SpecrunError, match=r"answers\[0\]\.tokens holds a token outside"):
        Engine.load(tiny_target, SUFFIX, options=LoadOptions(n_ctx=512), drafting=drafting)


def test_a_store_file_needs_suffix_drafts(tiny_target, tmp_path):
    drafting = DraftOptions(gamma="4", suffix_file=tmp_path / "store.json")
    with pytest.raises(OptionError, match="draft `suffix`"):
        Engine.load(tiny_target, PROMPT_LOOKUP, options=LoadOptions(n_ctx=512), drafting=drafting)
    assert not (tmp_path / "store.json").exists()


def test_the_command_line_keeps_the_store_between_runs(tiny_target, tmp_path):
    kept = tmp_path / "store.json"
    args = ["run", "-t", str(tiny_target), "-d", "suffix", "--suffix-store", str(kept)]
    args += ["--raw", "--temp", "0", "-n", "40", "--threads", "1", "--gamma", "4", "--json", PROMPT]
    first, second = specrun(*args), specrun(*args)
    assert first.returncode == second.returncode == 0, second.stderr
    runs = [json.loads(run.stdout) for run in (first, second)]
    assert runs[0]["text"] == runs[1]["text"]
    assert runs[1]["drafted"] > runs[0]["drafted"]
    assert "suffix store: 1 earlier answers" in second.stderr
