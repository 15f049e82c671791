"""The library entry point: a loaded target (and draft) that streams generations as events.

    import specrun
    with specrun.Engine.load("target.gguf", "draft.gguf") as engine:
        for event in engine.stream("Write a haiku", max_tokens=64):
            if isinstance(event, specrun.Round):
                print(event.text, end="", flush=True)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Sequence

from specrun.chat import prompt_tokens
from specrun.drafting import DraftSource, HybridDraft, LookupDraft, ModelDraft
from specrun.errors import OptionError, SpecrunError
from specrun.gamma import GammaPolicy, parse_policy
from specrun.runtime import Model, check_compatible, placement
from specrun.sampling import SamplingParams
from specrun.speculative import Event, generate


@dataclass(frozen=True)
class LoadOptions:
    n_ctx: int | None = 4096
    gpu_layers: int | None = None  # None: all layers where llama.cpp can offload
    draft_gpu_layers: int | None = None
    threads: int | None = None
    verbose: bool = False


LOOKUP = "lookup"  # the --draft value for prompt lookup without a draft model


@dataclass(frozen=True)
class LookupOptions:
    ngram: int = 3  # longest n-gram matched
    min_ngram: int = 2  # shortest n-gram matched
    max_tokens: int = 10  # longest continuation proposed

    def __post_init__(self) -> None:
        if not 1 <= self.min_ngram <= self.ngram:
            raise OptionError(f"--lookup-min ({self.min_ngram}) must lie in 1..--lookup-ngram ({self.ngram})")

    def draft(self) -> LookupDraft:
        return LookupDraft(self.ngram, self.min_ngram, self.max_tokens)


class Engine:
    """A target model, an optional draft source, sampling settings and a γ policy.

    The policy lives as long as the engine, so what it measured in one generation
    (acceptance, costs) carries over to the next turn of a conversation.
    """

    def __init__(
        self,
        target: Model,
        draft: DraftSource | None = None,
        *,
        params: SamplingParams = SamplingParams(),
        gamma: str = "auto",
        gamma_max: int = 8,
    ) -> None:
        self.target = target
        self.draft = draft
        self.params = params
        self.gamma_max = gamma_max
        self.policy: GammaPolicy = parse_policy(gamma, gamma_max)

    @classmethod
    def load(
        cls,
        target_path: str | Path,
        draft_path: str | Path | None = None,
        *,
        options: LoadOptions = LoadOptions(),
        p_min: float = 0.0,
        lookup: LookupOptions | None = None,
        **engine_options: object,
    ) -> "Engine":
        """Load the target and the draft and check that the draft can serve the target.

        `draft_path` is a GGUF file, or "lookup" for prompt lookup alone; `lookup`
        with a draft file gives the hybrid (lookup first, the model when nothing matches).
        """
        target = Model(
            target_path, n_ctx=options.n_ctx, gpu_layers=options.gpu_layers,
            threads=options.threads, verbose=options.verbose,
        )
        if str(draft_path) == LOOKUP:
            draft_path, lookup = None, lookup or LookupOptions()
        draft: DraftSource | None = None
        if draft_path is not None:
            draft_model = Model(
                draft_path, n_ctx=target.n_ctx, gpu_layers=options.draft_gpu_layers,
                threads=options.threads, verbose=options.verbose,
            )
            try:
                check_compatible(target, draft_model)
            except SpecrunError:
                draft_model.close()
                target.close()
                raise
            draft = ModelDraft(draft_model, target.n_vocab, p_min=p_min)
        if lookup is not None:
            draft = HybridDraft(lookup.draft(), draft) if isinstance(draft, ModelDraft) else lookup.draft()
        return cls(target, draft, **engine_options)  # type: ignore[arg-type]

    def set_gamma(self, spec: str) -> None:
        self.policy = parse_policy(spec, self.gamma_max)

    def set_params(self, **changes: object) -> None:
        self.params = replace(self.params, **changes)  # validated by SamplingParams

    def prompt(self, text: str, *, system: str | None = None, raw: bool = False) -> list[int]:
        return prompt_tokens(self.target, text, system=system, raw=raw)

    def stream(
        self,
        prompt: str | Sequence[int],
        *,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        cancelled: Callable[[], bool] = lambda: False,
    ) -> Iterator[Event]:
        """Generate from a text prompt (one user turn through the chat template) or token ids."""
        tokens = self.prompt(prompt) if isinstance(prompt, str) else list(prompt)
        return generate(
            self.target, tokens, draft=self.draft, params=self.params, policy=self.policy,
            max_tokens=max_tokens, stop=stop, cancelled=cancelled,
        )

    @property
    def draft_model(self) -> Model | None:
        draft = self.draft.model if isinstance(self.draft, HybridDraft) else self.draft
        return draft.model if isinstance(draft, ModelDraft) else None

    def placement(self) -> dict[str, object]:
        """The device the models run on and the GPU layers of the target (and draft)."""
        return placement(self.target, *([self.draft_model] if self.draft_model else []))

    def close(self) -> None:
        if self.draft_model is not None:
            self.draft_model.close()
        self.target.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
