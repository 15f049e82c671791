"""The speculative round loop. It yields events and knows nothing about terminals.

Invariant at the start of a round: the committed sequence `ctx` ends in a token
whose logits nobody has computed yet. A round drafts up to γ tokens after `ctx`,
verifies them (the target's logits for the last γ+1 positions of `ctx + drafts` in one
call, and the prefix of the drafts they accept: sampling.verify), commits that prefix
plus one new token, and reports the round as an event: `_Generation`'s four steps.
γ = 0 is plain target decoding. The first round is the exception: like
llama.cpp, the target evaluates the whole prompt in one pass, and the first token
comes from its last position's logits, with no decode of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast

import numpy as np

from specrun.core.constraint import Constraint
from specrun.core.drafting import DraftSource, Proposal, TreeSource
from specrun.core.gamma import FixedGamma, GammaPolicy
from specrun.core.model import LanguageModel
from specrun.core.sampling import (
    Draws,
    PositionNoise,
    Rows,
    SamplingParams,
    TokenLogprob,
    candidate_width,
    token_logprob,
    verify,
    verify_greedy,
    verify_seeded,
)
from specrun.core.sequence import Tokens
from specrun.core.text import Detokenizer, Segment, TextStream
from specrun.core.trees import TreeModel, verify_tree
from specrun.errors import OptionError, SpecrunError

# Why a generation ended: a stop text or end of generation, the token limit, the context
# full, or the consumer's cancel (the CLI adds "interrupted" for a signal).
FinishReason = Literal["stop", "length", "context", "cancelled"]
MAX_TOP_LOGPROBS = 20  # the most likely tokens a position's log-probabilities may list (OpenAI's)


@dataclass(frozen=True)
class Prefill:
    """The prompt is in the target's cache, its last position's logits kept for the first
    token (and in the draft's but for that token, where the policy drafts at once);
    `evaluated` counts the target's tokens actually decoded."""

    prompt_tokens: int
    evaluated: int
    seconds: float


@dataclass(frozen=True)
class Round:
    """One draft/verify/accept round: what it committed and what it cost."""

    tokens: tuple[int, ...]
    from_draft: tuple[bool, ...]
    segments: tuple[Segment, ...]  # the text released this round, split by origin
    gamma: int  # what the policy asked for
    drafted: int  # what the draft proposed (a confidence cutoff or lookup miss may stop early)
    accepted: int  # drafted tokens the target agreed with
    draft_seconds: float  # proposing the drafts
    verify_seconds: float
    overhead_seconds: float  # sampling, detokenizing, and the consumer's time since the last round
    finish_reason: FinishReason | None = None
    catch_up_seconds: float = 0.0  # the draft taking in what was committed while it paused
    # The target's first decode of this batch shape: one-time setup in its time.
    verify_first_of_shape: bool = False
    # Other slots' rows verified in the same decode, and how many slots they were for.
    shared_rows: int = 0
    shared_with: int = 0
    near_ties: int = 0  # greedy: committed tokens whose top-two logit gap was below NEAR_TIE
    ended_at_eog: bool = False  # the answer ended at an end-of-generation token, not in `tokens`
    prompt_pass: bool = False  # the first round: its logits came from the prompt's pass
    # With `logprobs` asked for: each committed token's, from the target's row that chose it.
    logprobs: tuple[TokenLogprob, ...] = ()
    branches: int = 0  # the drafts were a tree of this many branches (0: a chain, or none)

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.segments)

    @property
    def seconds(self) -> float:
        return (
            self.catch_up_seconds + self.draft_seconds + self.verify_seconds + self.overhead_seconds
        )


Event = Prefill | Round


def _never() -> bool:
    return False


@dataclass(frozen=True)
class GenerationSettings:
    """What one generation asks for besides its prompt: how it samples, how long it may run,
    the texts that end it, the consumer's cancel (polled between rounds), a grammar the answer
    keeps to, and how many of each position's most likely tokens its log-probabilities list."""

    params: SamplingParams = SamplingParams()
    max_tokens: int = 256
    stop: Sequence[str] = ()
    cancelled: Callable[[], bool] = _never
    constraint: Constraint | None = None
    logprobs: int | None = None
    # Special tokens whose text the answer keeps, though they render as nothing (Detokenizer).
    shown: Mapping[int, bytes] = field(default_factory=dict)


def generate(
    target: LanguageModel,
    prompt: Sequence[int],
    *,
    draft: DraftSource | None = None,
    params: SamplingParams = SamplingParams(),
    policy: GammaPolicy | None = None,
    max_tokens: int = 256,
    stop: Sequence[str] = (),
    cancelled: Callable[[], bool] = _never,
    rng: Draws | None = None,
    constraint: Constraint | None = None,
    logprobs: int | None = None,
) -> Generator[Event, None, None]:
    """Stream a generation as events: one Prefill, then one Round per target forward pass
    (the first round's is the prompt's).

    Without a draft every round is plain decoding (γ = 0). `cancelled` is polled
    between rounds so a front end can stop a generation cleanly. Under `constraint` (a
    grammar, at the start of the answer) every token drafted and committed is one it
    allows, and the output is distributed as the constrained target's; it follows the
    committed tokens. With `logprobs` (0-20), each Round carries its tokens' log-probabilities
    and that many of the most likely tokens at each position (`TokenLogprob`): the target's,
    whether a token was drafted or not.
    """
    settings = GenerationSettings(params, max_tokens, stop, cancelled, constraint, logprobs)
    return generate_with(target, prompt, settings, draft=draft, policy=policy, rng=rng)


def generate_with(
    target: LanguageModel,
    prompt: Sequence[int],
    settings: GenerationSettings,
    *,
    draft: DraftSource | None = None,
    policy: GammaPolicy | None = None,
    rng: Draws | None = None,
) -> Generator[Event, None, None]:
    """`generate`, the generation's settings in one typed object. Each round drafts,
    verifies, commits and reports (`_Generation`'s steps, in that order)."""
    _check(target, prompt, settings)
    generation = _Generation(
        target,
        prompt,
        settings,
        draft,
        policy or FixedGamma(4),
        rng if rng is not None else settings.params.draws(),
    )
    yield generation.prefill()
    generation.round_end = time.perf_counter()  # the consumer's time on the Prefill is its own
    while True:
        round_start = time.perf_counter()
        if settings.cancelled():
            yield generation.cancel(round_start)
            return
        drafted = generation.draft(round_start)
        verified = generation.verify(drafted)
        committed = generation.commit(drafted.proposal, verified)
        yield generation.report(drafted, verified, committed)
        if committed.finish:
            return


def _check(target: LanguageModel, prompt: Sequence[int], settings: GenerationSettings) -> None:
    if not prompt:
        raise SpecrunError("the prompt is empty")
    if len(prompt) >= target.n_ctx:
        raise SpecrunError(
            f"the prompt is {len(prompt)} tokens; it must be shorter than the context "
            f"({target.n_ctx}) to leave room for the answer{more_room_hint(target)}"
        )
    if settings.max_tokens < 1:
        raise OptionError(f"`max_tokens` must be at least 1, got {settings.max_tokens}")
    beyond = [token for token, _ in settings.params.logit_bias if token >= target.n_vocab]
    if beyond:
        raise OptionError(
            f"`logit_bias` names token {beyond[0]}, but the vocabulary has {target.n_vocab}"
        )
    logprobs = settings.logprobs
    if logprobs is not None and not 0 <= logprobs <= MAX_TOP_LOGPROBS:
        raise OptionError(
            f"`top_logprobs` must be between 0 and {MAX_TOP_LOGPROBS}, got {logprobs}"
        )


_NOTHING_DRAFTED = Proposal()  # read only: one for every round that drafts nothing


@dataclass(slots=True)
class _Drafted:
    """A round's drafts, and when drafting started and ended."""

    gamma: int  # what the policy asked for
    proposal: Proposal
    started: float
    ended: float
    prompt_pass: bool  # the first round drafts nothing: the prompt's pass has its logits


@dataclass(slots=True)
class _Verified:
    """The target's rows for the drafts and the token after them, and what they accept."""

    rows: Rows  # the target's rows of the committed tokens, in order (a tree's: along its path)
    accepted: int  # drafts the target agreed with
    accepted_tokens: list[int]  # what they are
    next_token: int  # the token after them: a resample at a rejection, else the bonus
    near_ties: list[bool]  # greedy: per committed row, whether its top two nearly tie
    ended: float
    first_of_shape: bool


@dataclass(slots=True)
class _Committed:
    """What a round added to the answer."""

    tokens: list[int]
    from_draft: list[bool]
    segments: list[Segment]
    finish: FinishReason | None
    ended_at_eog: bool
    logprobs: tuple[TokenLogprob, ...]


class _Generation:
    """One generation between its rounds: the committed sequence `ctx` (append-only: each
    model compares only what is new), the text released so far, and what every round reads."""

    def __init__(
        self,
        target: LanguageModel,
        prompt: Sequence[int],
        settings: GenerationSettings,
        draft: DraftSource | None,
        policy: GammaPolicy,
        rng: Draws,
    ) -> None:
        self.target, self.source, self.policy, self.rng = target, draft, policy, rng
        self.settings, self.params, self.constraint = settings, settings.params, settings.constraint
        self.ctx = Tokens(prompt)
        self.stream = TextStream(Detokenizer(target, settings.shown), settings.stop)
        self.generated = 0
        # Where the target's device samples, only each row's best candidates leave it; whole
        # rows under a constraint (the best it allows may lie anywhere in the row) and for
        # log-probabilities (log-softmax needs them).
        whole_rows = settings.constraint is not None or settings.logprobs is not None
        self.top = None if whole_rows else candidate_width(settings.params, target.n_vocab)
        self.prompt_logits: Rows | None = None  # the first round's, from the prompt's pass
        self.round_end = 0.0  # when the last round was handed over
        # Trees: where the source grows them and the target verifies them, and no constraint
        # (a grammar's state would have to fork at every branch) asks for a chain.
        leaves = min(getattr(draft, "leaves", 1), getattr(target, "tree_branches", 0))
        self.leaves = leaves if settings.constraint is None else 0

    def prefill(self) -> Prefill:
        """The whole prompt in one pass, its last position's logits kept (a copy: the draft
        may decode before the first round reads them). Decoding its last token apart, as the
        other rounds decode theirs, would cost a forward pass more before the first token.
        As a view of ctx, so that the next round, like every other, compares only what is new."""
        target, start, evaluated = self.target, time.perf_counter(), self.target.n_evaluated
        self.prompt_logits = target.logits(self.ctx.then([]), 1, top=self.top)
        if self.source is not None and self.policy.next_gamma() > 0:
            self.source.prefill(self.ctx.but_last())  # else it catches up when first asked
        return Prefill(len(self.ctx), target.n_evaluated - evaluated, time.perf_counter() - start)

    def cancel(self, round_start: float) -> Round:
        """The consumer's cancel: a round that commits nothing and releases what was held."""
        _keep_committed(self.target, self.ctx)
        return _finish_round(self.stream, "cancelled", round_start - self.round_end)

    def draft(self, round_start: float) -> _Drafted:
        """Up to γ drafts after ctx, room left for them and the token the target adds inside
        both limits; none in the first round, whose token the prompt's pass chooses."""
        if self.prompt_logits is not None:
            return _Drafted(0, _NOTHING_DRAFTED, round_start, round_start, True)
        room = min(self.settings.max_tokens - self.generated, self.target.n_ctx - len(self.ctx)) - 1
        gamma = min(self.policy.next_gamma(), room) if self.source is not None else 0
        if self.source is None or gamma == 0:
            proposal = _NOTHING_DRAFTED
        elif self.leaves > 1:
            proposal = cast(TreeSource, self.source).propose_tree(self.ctx, gamma, self.leaves)
        else:
            proposal = self.source.propose(self.ctx, gamma, self.params, self.rng, self.constraint)
        return _Drafted(gamma, proposal, round_start, time.perf_counter(), False)

    def verify(self, drafted: _Drafted) -> _Verified:
        """The target's logits for the last γ+1 positions of ctx + drafts in one call (a
        view of llama.cpp's buffer, read before the target's next call), and the prefix of
        the drafts they accept with the token after it (sampling.verify)."""
        if drafted.proposal.tree is not None:
            return self._verify_tree(drafted)
        drafts = drafted.proposal.tokens
        if self.prompt_logits is not None:
            rows, self.prompt_logits = self.prompt_logits, None
        else:
            rows = self.target.logits(
                self.ctx.then(drafts), len(drafts) + 1, view=True, top=self.top
            )
        ended = time.perf_counter()
        first_of_shape = self.target.first_of_shape and not drafted.prompt_pass
        params = self.params
        if params.penalized and isinstance(rows, np.ndarray):
            rows = _penalized(rows, params, self.ctx, drafts)
        ties: list[bool] = []
        if params.greedy:
            accepted, next_token, ties = verify_greedy(rows, drafts, self.constraint)
        elif isinstance(self.rng, PositionNoise):  # a seed: the tokens plain decoding draws
            at = len(self.ctx)
            accepted, next_token = verify_seeded(
                rows, drafts, params, self.rng, at, self.constraint
            )
        else:
            probs = drafted.proposal.probs
            accepted, next_token = verify(rows, drafts, probs, params, self.rng, self.constraint)
        return _Verified(rows, accepted, drafts[:accepted], next_token, ties, ended, first_of_shape)

    def _verify_tree(self, drafted: _Drafted) -> _Verified:
        """`verify` of a tree: the target's rows for the last committed token and every node
        in one pass, the path they accept (trees.verify_tree), and the cache keeping it."""
        tree, target = drafted.proposal.tree, cast(TreeModel, self.target)
        assert tree is not None
        rows = target.tree_logits(self.ctx, tree)
        ended = time.perf_counter()
        params, ctx = self.params, self.ctx

        def penalize(node: int, row: np.ndarray) -> np.ndarray:
            penalized: np.ndarray = row.copy()
            params.penalize(penalized, ctx.then([tree.tokens[n] for n in tree.path(node)]))
            return penalized

        path, next_token, ties = verify_tree(
            rows, tree, params, self.rng, len(ctx), penalize if params.penalized else None
        )
        target.keep_path(path)
        # The rows that chose the committed tokens, where their log-probabilities are asked.
        chosen = rows[[0, *(node + 1 for node in path)]] if self.settings.logprobs else rows
        accepted = [tree.tokens[node] for node in path]
        first_of_shape = self.target.first_of_shape
        return _Verified(chosen, len(path), accepted, next_token, ties, ended, first_of_shape)

    def commit(self, proposal: Proposal, verified: _Verified) -> _Committed:
        """The accepted drafts and the next token, up to an end of generation; appended to
        ctx, fed to the constraint and the text; and why the answer ends, if it does."""
        accepted = verified.accepted
        tokens = [*verified.accepted_tokens, verified.next_token]
        from_draft = [True] * accepted + [False]
        ended_at_eog = False
        for i, token in enumerate(tokens):
            if self.target.is_eog(token):  # the answer ends here; drop what was accepted after it
                del tokens[i:], from_draft[i:]
                ended_at_eog = True
                break
        logprobs = self.settings.logprobs
        chosen = (
            tuple(token_logprob(verified.rows[j], t, logprobs) for j, t in enumerate(tokens))
            if logprobs is not None and isinstance(verified.rows, np.ndarray)
            else ()
        )
        self.ctx.extend(tokens)
        if self.constraint is not None:
            for token in tokens:
                self.constraint.accept(token)
        self.generated += len(tokens)
        segments, hit_stop = self.stream.feed(tokens, from_draft)
        finish: FinishReason | None = "stop" if ended_at_eog or hit_stop else None
        if finish is None and self.generated >= self.settings.max_tokens:
            finish = "length"
        elif finish is None and len(self.ctx) >= self.target.n_ctx:
            finish = "context"
        if finish and not hit_stop:
            segments += self.stream.flush()
        if finish:
            _keep_committed(self.target, self.ctx)
        return _Committed(tokens, from_draft, segments, finish, ended_at_eog, chosen)

    def report(self, drafted: _Drafted, verified: _Verified, committed: _Committed) -> Round:
        """The round's event, which the policy learns from where it chose γ (not the first)."""
        now = time.perf_counter()
        proposal = drafted.proposal
        event = Round(
            tokens=tuple(committed.tokens),
            from_draft=tuple(committed.from_draft),
            segments=tuple(committed.segments),
            gamma=drafted.gamma,
            drafted=proposal.size,
            accepted=verified.accepted,
            draft_seconds=drafted.ended - drafted.started - proposal.catch_up_seconds,
            verify_seconds=verified.ended - drafted.ended,
            overhead_seconds=(now - verified.ended) + (drafted.started - self.round_end),
            finish_reason=committed.finish,
            catch_up_seconds=proposal.catch_up_seconds,
            near_ties=sum(verified.near_ties[: len(committed.tokens)]),
            verify_first_of_shape=verified.first_of_shape,
            shared_rows=self.target.shared_rows,
            shared_with=self.target.shared_with,
            ended_at_eog=committed.ended_at_eog,
            prompt_pass=drafted.prompt_pass,
            logprobs=committed.logprobs,
            branches=len(proposal.tree.leaves()) if proposal.tree is not None else 0,
        )
        self.round_end = now
        if not drafted.prompt_pass:
            self.policy.observe(event)
        return event


def _penalized(
    rows: np.ndarray, params: SamplingParams, ctx: Tokens, drafts: list[int]
) -> np.ndarray:
    """A copy of the verify's rows, each with the bias and penalties for the text before its
    position: the committed text and the drafts before it, as the draft saw them."""
    rows = np.array(rows)
    for j, row in enumerate(rows):
        params.penalize(row, ctx.then(drafts[:j]))
    return rows


def more_room_hint(target: LanguageModel) -> str:
    """'; use `n_ctx` ...' where the model allows a larger context than the one loaded."""
    if target.n_ctx < target.n_ctx_train:
        return f"; use `n_ctx` (up to {target.n_ctx_train})"
    return ""


def _keep_committed(target: LanguageModel, ctx: Tokens) -> None:
    """Drop what the target's cache holds past the committed sequence but its last token
    (rejected drafts, an accepted end of generation): what plain decoding leaves, so the
    next generation reuses only what it would (--reproducible's serial verify needs this)."""
    target.logits(ctx.but_last(), 0)  # compares only what the last round added


def _finish_round(stream: TextStream, reason: FinishReason, overhead: float) -> Round:
    """A round that commits nothing and only releases held-back text."""
    return Round((), (), tuple(stream.flush()), 0, 0, 0, 0.0, 0.0, overhead, reason)
