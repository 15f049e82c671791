"""The library entry point: a loaded target (and draft) that streams generations as events.

import specrun
with specrun.Engine.load("target.gguf", "draft.gguf") as engine:
    for event in engine.stream("Write a haiku", max_tokens=64):
        if isinstance(event, specrun.Round):
            print(event.text, end="", flush=True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import llama_cpp

from specrun.core import learned
from specrun.core.drafting import DraftSource, HybridDraft, ModelDraft
from specrun.core.gamma import GAMMA_MAX, GammaPolicy, parse_policy
from specrun.core.heads import HeadDraft
from specrun.core.loop import Event, generate
from specrun.core.sampling import SamplingParams
from specrun.llama import rpc
from specrun.llama.compat import check_compatible
from specrun.llama.devices import gpu_free_bytes, gpu_handles
from specrun.llama.grammar import Grammar
from specrun.llama.heads import NativeHead, open_eagle3, open_mtp
from specrun.llama.model import DEFAULT_CTX, Model
from specrun.llama.placement import Gpu, LayerPlan, Placement, plan_layers
from specrun.options import (
    DraftOptions,
    DraftSpec,
    Eagle3Head,
    LoadOptions,
    MtpLayers,
    PromptLookup,
)
from specrun.prompt import prompt_tokens


class Engine:
    """A target model, an optional draft source, sampling settings and a γ policy.

    The policy lives as long as the engine, so what it measured in one generation
    (acceptance, costs) carries over to the next turn of a conversation. An engine made
    by `load` also starts `auto` from what an earlier engine for the same pair and
    settings learned, and leaves what it learned for the next (specrun.core.learned).
    """

    def __init__(
        self,
        target: Model,
        draft: DraftSource | None = None,
        *,
        params: SamplingParams = SamplingParams(),
        gamma: str = "auto",
        gamma_max: int = GAMMA_MAX,
    ) -> None:
        self.target = target
        self.draft = draft
        self.params = params
        self.gamma_max = gamma_max
        self.policy: GammaPolicy = self._policy(gamma)
        self.layer_plan: LayerPlan | None = (
            None  # the placement by free memory, where there were GPUs
        )
        self.remotes: list[rpc.Remote] = []  # the RPC servers' devices the target's layers may use
        self.gpu_bytes_used = 0  # what loading took from the GPUs' free memory, measured
        self.learned_path: Path | None = None  # where auto's learned state is kept, if it is
        self._learned_key: dict[str, object] = {}  # the settings that path is named by
        self.recalled = False  # whether auto started from that state rather than its warm-up

    @classmethod
    def load(
        cls,
        target_path: str | Path,
        draft: DraftSpec | Sequence[DraftSpec] | None = None,
        *,
        options: LoadOptions = LoadOptions(),
        params: SamplingParams = SamplingParams(),
        drafting: DraftOptions = DraftOptions(),
        announce: Callable[[str], None] = lambda line: None,
    ) -> Engine:
        """Load the target and the draft and check that the draft can serve the target.

        `draft` is a draft model's GGUF file, `PROMPT_LOOKUP` for prompt lookup, an
        `Eagle3Head` made for the target, `MTP_LAYERS` for the target's own MTP layers, or
        several of them: several sources (or one with `drafting.hybrid`, which adds prompt
        lookup) make the hybrid, whose auto picks the source that pays each round.
        With GPUs, the layers are placed by free memory first (`specrun.llama.placement`), and
        `announce` hears the one line that says where they went. `options.rpc` adds RPC
        servers' devices for the target, ahead of this machine's GPUs (specrun.llama.rpc).
        """
        n_ctx = options.n_ctx or DEFAULT_CTX
        choices = _draft_choices(draft)
        draft_file = next((Path(c) for c in choices if isinstance(c, str | Path)), None)
        remotes = rpc.connect(options.rpc) if options.rpc else []
        remote_gpus = [
            Gpu(r.device.name, r.device.free_bytes, r.device.total_bytes, r.endpoint)
            for r in remotes
        ]
        placed = (
            plan_layers(Path(target_path), draft_file, n_ctx, remote_gpus) if options.fit else None
        )
        if placed is not None:
            announce(placed.line)
        free_before = gpu_free_bytes() + rpc.free_bytes(remotes)
        target = Model(
            target_path,
            n_ctx=n_ctx,
            threads=options.threads,
            verbose=options.verbose,
            gpu_layers=_layers(options.gpu_layers, placed.target_layers if placed else None),
            split=placed.split if placed else None,
            reproducible=options.reproducible,
            devices=[r.handle for r in remotes] + gpu_handles() if remotes else None,
            load_mtp=any(isinstance(c, MtpLayers) for c in choices),
            backend_sampling=options.backend_sampling,
        )
        drafts: list[DraftSource] = []
        try:
            for choice in choices:
                if isinstance(choice, Eagle3Head | MtpLayers):
                    head, rows = (
                        open_eagle3(choice.path, target)
                        if isinstance(choice, Eagle3Head)
                        else open_mtp(target)
                    )
                    drafts.append(HeadDraft(head, rows, target.n_vocab, p_min=drafting.p_min))
                elif not isinstance(choice, PromptLookup):
                    draft_model = Model(
                        choice,
                        n_ctx=target.n_ctx,
                        threads=options.threads,
                        verbose=options.verbose,
                        gpu_layers=_layers(
                            options.draft_gpu_layers, placed.draft_layers if placed else None
                        ),
                        main_gpu=placed.draft_gpu if placed else None,
                        backend_sampling=options.backend_sampling,
                    )
                    drafts.append(ModelDraft(draft_model, target.n_vocab, p_min=drafting.p_min))
                    check_compatible(target, draft_model)
        except BaseException:  # a bad draft, or Ctrl-C while one loads: free what was loaded
            for loaded in reversed(drafts):
                _close_draft(loaded)
            target.close()
            raise
        use_lookup = drafting.hybrid or any(isinstance(c, PromptLookup) for c in choices)
        lookup = drafting.lookup.draft() if use_lookup else None
        source: DraftSource | None = (
            HybridDraft(lookup, drafts)
            if drafts and (lookup or len(drafts) > 1)
            else drafts[0]
            if drafts
            else lookup
        )
        engine = cls(
            target, source, params=params, gamma=drafting.gamma, gamma_max=drafting.gamma_max
        )
        engine.layer_plan, engine.remotes = placed, remotes
        engine.gpu_bytes_used = free_before - gpu_free_bytes() - rpc.free_bytes(remotes)
        if source is not None:
            engine._learned_key = engine._learned_settings(source)
            engine.learned_path = learned.path_for(engine._learned_key)
            engine.recalled = learned.load(engine.policy, engine.learned_path)
        return engine

    def _learned_settings(self, draft: DraftSource) -> dict[str, object]:
        """What the costs and acceptance that auto learns depend on."""
        models = [self.target, *self.draft_models]
        heads = [getattr(d.head, "path", None) for d in self.drafts if isinstance(d, HeadDraft)]
        return {
            "models": [
                learned.file_identity(m.path) + [m.threads, m.offloaded_layers] for m in models
            ]
            + [learned.file_identity(path) for path in heads if isinstance(path, Path)],
            "draft": [draft.name, *_draft_settings(draft)],
            "gamma_max": self.gamma_max,
            "llama.cpp": llama_cpp.__version__,
            "device": Placement.of(models).device,
            **({"rpc": self.rpc_servers} if self.remotes else {}),  # costs over a network differ
        }

    def _policy(self, spec: str) -> GammaPolicy:
        """The γ policy `spec` names; the hybrid's auto chooses its source per round too."""
        if isinstance(self.draft, HybridDraft):
            return self.draft.policy(spec, self.gamma_max)
        return parse_policy(spec, self.gamma_max)

    def set_gamma(self, spec: str) -> None:
        self.policy = self._policy(spec)
        if self.learned_path is not None:
            self.recalled = learned.load(self.policy, self.learned_path)

    def set_params(self, **changes: Any) -> None:  # noqa: ANN401 - SamplingParams checks each
        self.params = replace(self.params, **changes)

    def prompt(self, text: str, *, system: str | None = None, raw: bool = False) -> list[int]:
        return prompt_tokens(self.target, text, system=system, raw=raw)

    def stream(
        self,
        prompt: str | Sequence[int],
        *,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        cancelled: Callable[[], bool] = lambda: False,
        params: SamplingParams | None = None,
        grammar: str | None = None,
        logprobs: int | None = None,
    ) -> Iterator[Event]:
        """Generate from a text prompt (one user turn through the chat template) or token ids.

        `params` samples this generation alone; None takes the engine's own (`self.params`).
        `grammar` (GBNF; `JSON_GRAMMAR`, `schema_grammar(schema)`) constrains the answer:
        drafts and verification alike, so it is distributed as the constrained target's.
        `logprobs` (0-20): each Round carries its tokens' log-probabilities, with that many of
        the most likely tokens at each position.
        """
        tokens = self.prompt(prompt) if isinstance(prompt, str) else list(prompt)
        return generate(
            self.target,
            tokens,
            draft=self.draft,
            params=self.params if params is None else params,
            policy=self.policy,
            max_tokens=max_tokens,
            stop=stop,
            cancelled=cancelled,
            constraint=Grammar(self.target, grammar) if grammar is not None else None,
            logprobs=logprobs,
        )

    @property
    def rpc_servers(self) -> list[str]:
        return list(dict.fromkeys(remote.endpoint for remote in self.remotes))

    @property
    def drafts(self) -> list[DraftSource]:
        """The draft models' and heads' sources (inside the hybrid, if it is one)."""
        if isinstance(self.draft, HybridDraft):
            return list(self.draft.drafts)
        return [self.draft] if isinstance(self.draft, ModelDraft | HeadDraft) else []

    @property
    def draft_models(self) -> list[Model]:
        models = (d.model for d in self.drafts if isinstance(d, ModelDraft))
        return [m for m in models if isinstance(m, Model)]

    @property
    def draft_model(self) -> Model | None:
        """The (first) draft model."""
        return next(iter(self.draft_models), None)

    @property
    def head(self) -> NativeHead | None:
        """The (first) EAGLE-3 head or MTP layers that draft."""
        heads = (d.head for d in self.drafts if isinstance(d, HeadDraft))
        return next((h for h in heads if isinstance(h, NativeHead)), None)

    def placement(self) -> Placement:
        """The device the models run on, the GPU layers of the target (and draft), and where
        layers were placed by free memory, the estimate beside what loading really took."""
        where = Placement.of([self.target, *([self.draft_model] if self.draft_model else [])])
        if self.remotes:
            where = where.with_rpc(self.rpc_servers)
        if self.layer_plan is not None:
            where = replace(where, plan=self.layer_plan, gpu_bytes_measured=self.gpu_bytes_used)
        return where

    def close(self) -> None:
        if self.learned_path is not None:
            learned.save(self.policy, self.learned_path, self._learned_key)
            self.learned_path = None  # closing twice saves once
        for draft in self.drafts:  # before the target, whose context a head uses
            _close_draft(draft)
        self.target.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _layers(asked: int | None, fitted: int | None) -> int | None:
    """--gpu-layers wins over the fit; None leaves llama.cpp's all-layers default to the runtime."""
    return asked if asked is not None else fitted


def _draft_choices(draft: DraftSpec | Sequence[DraftSpec] | None) -> list[DraftSpec]:
    if draft is None:
        return []
    if isinstance(draft, str | Path | PromptLookup | Eagle3Head | MtpLayers):
        return [draft]
    return list(draft)


def _close_draft(source: DraftSource) -> None:
    native = source.model if isinstance(source, ModelDraft) else getattr(source, "head", None)
    if isinstance(native, Model | NativeHead):
        native.close()


def _draft_settings(source: DraftSource) -> list[object]:
    """The draft source's own settings: what changes its proposals."""
    if isinstance(source, HybridDraft):
        sources = [*([source.lookup] if source.lookup else []), *source.drafts]
        return [setting for part in sources for setting in _draft_settings(part)]
    if isinstance(source, ModelDraft | HeadDraft):
        return [source.p_min]
    return [getattr(source, name, None) for name in ("ngram_min", "ngram_max", "max_tokens")]
