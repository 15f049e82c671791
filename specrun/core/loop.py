"""The speculative round loop. It yields events and knows nothing about terminals.

Invariant at the start of a round: the committed sequence `ctx` ends in a token
whose logits nobody has computed yet. A round drafts up to γ tokens after `ctx`,
asks the target for the logits of the last γ+1 positions of `ctx + drafts` in one
call, accepts a prefix of the drafts (sampling.verify) and commits it plus one new
token. γ = 0 is plain target decoding. The first round is the exception: like
llama.cpp, the target evaluates the whole prompt in one pass, and the first token
comes from its last position's logits, with no decode of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from specrun.core.constraint import Constraint
from specrun.core.drafting import DraftSource, Proposal
from specrun.core.gamma import FixedGamma, GammaPolicy
from specrun.core.model import LanguageModel
from specrun.core.sampling import (
    Rows,
    SamplingParams,
    TokenLogprob,
    candidate_width,
    token_logprob,
    verify,
    verify_greedy,
)
from specrun.core.sequence import Tokens
from specrun.core.text import Detokenizer, Segment, TextStream
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

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.segments)

    @property
    def seconds(self) -> float:
        return (
            self.catch_up_seconds + self.draft_seconds + self.verify_seconds + self.overhead_seconds
        )


Event = Prefill | Round


def generate(
    target: LanguageModel,
    prompt: Sequence[int],
    *,
    draft: DraftSource | None = None,
    params: SamplingParams = SamplingParams(),
    policy: GammaPolicy | None = None,
    max_tokens: int = 256,
    stop: Sequence[str] = (),
    cancelled: Callable[[], bool] = lambda: False,
    rng: np.random.Generator | None = None,
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
    if not prompt:
        raise SpecrunError("the prompt is empty")
    if len(prompt) >= target.n_ctx:
        raise SpecrunError(
            f"the prompt is {len(prompt)} tokens; it must be shorter than the context "
            f"({target.n_ctx}) to leave room for the answer{more_room_hint(target)}"
        )
    if max_tokens < 1:
        raise OptionError(f"`max_tokens` must be at least 1, got {max_tokens}")
    beyond = [token for token, _ in params.logit_bias if token >= target.n_vocab]
    if beyond:
        raise OptionError(
            f"`logit_bias` names token {beyond[0]}, but the vocabulary has {target.n_vocab}"
        )
    if logprobs is not None and not 0 <= logprobs <= MAX_TOP_LOGPROBS:
        raise OptionError(
            f"`top_logprobs` must be between 0 and {MAX_TOP_LOGPROBS}, got {logprobs}"
        )
    policy = policy or FixedGamma(4)
    rng = rng if rng is not None else params.rng()
    ctx = Tokens(prompt)  # append-only: each model compares only what is new

    # Where the target's device samples, only each row's best candidates leave it (not under
    # a constraint: the best it allows may lie anywhere in the row).
    top = candidate_width(params, target.n_vocab)
    if constraint is not None or logprobs is not None:  # whole rows: log-softmax needs them
        top = None

    start = time.perf_counter()
    evaluated = target.n_evaluated
    # The whole prompt in one pass, its last position's logits kept (a copy: the draft may
    # decode before the first round reads them). Decoding its last token apart, as the
    # other rounds decode theirs, would cost a forward pass more before the first token.
    # As a view of ctx, so that the next round, like every other, compares only what is new.
    prompt_logits: Rows | None = target.logits(ctx.then([]), 1, top=top)
    if (
        draft is not None and policy.next_gamma() > 0
    ):  # else the draft catches up when it is first asked
        draft.prefill(ctx.but_last())
    yield Prefill(len(ctx), target.n_evaluated - evaluated, time.perf_counter() - start)

    stream = TextStream(Detokenizer(target), stop)
    generated = 0
    round_end = time.perf_counter()
    while True:
        round_start = time.perf_counter()
        if cancelled():
            _keep_committed(target, ctx)
            yield _finish_round(stream, "cancelled", round_start - round_end)
            return
        prompt_pass = prompt_logits is not None
        if prompt_logits is not None:
            gamma, proposal, logits, prompt_logits = 0, Proposal(), prompt_logits, None
            drafted_at = round_start
        else:
            # Room for γ drafts and the one token the target adds, inside both limits.
            room = min(max_tokens - generated, target.n_ctx - len(ctx)) - 1
            gamma = min(policy.next_gamma(), room) if draft is not None else 0
            proposal = (
                draft.propose(ctx, gamma, params, rng, constraint)
                if draft is not None and gamma > 0
                else Proposal()
            )
            drafted_at = time.perf_counter()
            # A view of llama.cpp's buffer, read before the target's next call.
            logits = target.logits(
                ctx.then(proposal.tokens), len(proposal.tokens) + 1, view=True, top=top
            )
        verified_at = time.perf_counter()
        first_of_shape = target.first_of_shape and not prompt_pass
        if params.penalized and isinstance(logits, np.ndarray):
            logits = _penalized(logits, params, ctx, proposal.tokens)
        if params.greedy:
            accepted, next_token, ties = verify_greedy(logits, proposal.tokens, constraint)
        else:
            (accepted, next_token), ties = (
                verify(logits, proposal.tokens, proposal.probs, params, rng, constraint),
                [],
            )

        new_tokens = [*proposal.tokens[:accepted], next_token]
        from_draft = [True] * accepted + [False]
        finish: FinishReason | None = None
        ended_at_eog = False
        for i, token in enumerate(new_tokens):
            if target.is_eog(token):  # the answer ends here; drop whatever was accepted after it
                del new_tokens[i:], from_draft[i:]
                finish, ended_at_eog = "stop", True
                break
        chosen = (
            tuple(token_logprob(logits[j], token, logprobs) for j, token in enumerate(new_tokens))
            if logprobs is not None and isinstance(logits, np.ndarray)
            else ()
        )
        ctx.extend(new_tokens)
        if constraint is not None:
            for token in new_tokens:
                constraint.accept(token)
        generated += len(new_tokens)
        segments, hit_stop = stream.feed(new_tokens, from_draft)
        if hit_stop:
            finish = "stop"
        elif finish is None and generated >= max_tokens:
            finish = "length"
        elif finish is None and len(ctx) >= target.n_ctx:
            finish = "context"
        if finish and not hit_stop:
            segments += stream.flush()
        if finish:
            _keep_committed(target, ctx)

        now = time.perf_counter()
        event = Round(
            tokens=tuple(new_tokens),
            from_draft=tuple(from_draft),
            segments=tuple(segments),
            gamma=gamma,
            drafted=len(proposal.tokens),
            accepted=accepted,
            draft_seconds=drafted_at - round_start - proposal.catch_up_seconds,
            verify_seconds=verified_at - drafted_at,
            overhead_seconds=(now - verified_at) + (round_start - round_end),
            finish_reason=finish,
            catch_up_seconds=proposal.catch_up_seconds,
            near_ties=sum(ties[: len(new_tokens)]),
            verify_first_of_shape=first_of_shape,
            shared_rows=target.shared_rows,
            shared_with=target.shared_with,
            ended_at_eog=ended_at_eog,
            prompt_pass=prompt_pass,
            logprobs=chosen,
        )
        round_end = now
        if not prompt_pass:  # the policies learn from the rounds they chose, which decode
            policy.observe(event)
        yield event
        if finish:
            return


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
