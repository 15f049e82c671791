"""The library entry point: a loaded target (and draft) that streams generations as events.

import specrun
with specrun.Engine.load("target.gguf", "draft.gguf") as engine:
    for event in engine.stream("Write a haiku", max_tokens=64):
        if isinstance(event, specrun.Round):
            print(event.text, end="", flush=True)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Sequence
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import llama_cpp

from specrun.core import learned
from specrun.core.drafting import DraftSource, HybridDraft, ModelDraft
from specrun.core.gamma import GAMMA_MAX, GammaPolicy, parse_policy
from specrun.core.heads import HeadDraft
from specrun.core.loop import Event, generate
from specrun.core.sampling import SamplingParams
from specrun.core.sequence import common_prefix_length
from specrun.errors import OptionError
from specrun.llama import rpc
from specrun.llama.compat import check_compatible
from specrun.llama.devices import gpu_free_bytes, gpu_handles
from specrun.llama.grammar import Grammar
from specrun.llama.heads import NativeHead, open_eagle3, open_mtp
from specrun.llama.model import DEFAULT_CTX, Model
from specrun.llama.placement import Gpu, LayerPlan, Placement, plan_layers
from specrun.llama.slots import Gather, SequenceView
from specrun.options import (
    DraftOptions,
    DraftSpec,
    Eagle3Head,
    LoadOptions,
    MtpLayers,
    PromptLookup,
)
from specrun.prompt import prompt_tokens
from specrun.system.busy import Contention, Watch


@dataclass
class Slot:
    """One of a parallel engine's generations at once: its sequence of each model (views),
    its draft source and its γ policy, which learns from its own rounds."""

    index: int
    target: SequenceView
    draft: DraftSource | None
    policy: GammaPolicy


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
        self.gamma_spec = gamma
        self.policy: GammaPolicy = self._policy(gamma, draft)
        self.layer_plan: LayerPlan | None = (
            None  # the placement by free memory, where there were GPUs
        )
        self.remotes: list[rpc.Remote] = []  # the RPC servers' devices the target's layers may use
        # What loading took from the GPUs' free memory, measured; None where their free memory
        # did not move (a device that reports no budget, as Mesa's lavapipe).
        self.gpu_bytes_used: int | None = None
        self.learned_path: Path | None = None  # where auto's learned state is kept, if it is
        self._learned_key: dict[str, object] = {}  # the settings that path is named by
        self.recalled = False  # whether auto started from that state rather than its warm-up
        # Other programs' CPU use over the last generation that ran to its end (None: not
        # measured); costs measured while they slowed one are not kept for the next engine.
        self.contention: Contention | None = None
        self._slowed = False
        # With `parallel` > 1: the slots, those free to take a generation, and the gather
        # their model calls meet in.
        self.slots: list[Slot] = []
        self._free: list[Slot] = []  # the least recently freed first
        self._slot_freed = threading.Condition()
        self._gather = Gather()

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
        parallel = options.parallel
        if parallel < 1:
            raise OptionError(f"`parallel` must be at least 1, got {parallel}")
        if parallel > 1 and options.reproducible:
            raise OptionError("`reproducible` decodes one sequence at a time: use `parallel` 1")
        if parallel > 1 and any(isinstance(c, Eagle3Head | MtpLayers) for c in choices):
            raise OptionError(
                "EAGLE-3 heads and MTP layers draft for one sequence at a time: use `parallel` 1"
            )
        draft_file = next((Path(c) for c in choices if isinstance(c, str | Path)), None)
        remotes = rpc.connect(options.rpc) if options.rpc else []
        remote_gpus = [
            Gpu(r.device.name, r.device.free_bytes, r.device.total_bytes, r.endpoint)
            for r in remotes
        ]
        placed = (
            plan_layers(Path(target_path), draft_file, n_ctx, remote_gpus, parallel)
            if options.fit
            else None
        )
        # `gpu_layers` and `draft_gpu_layers` win over the fit: its line is said where it holds.
        asked = options.gpu_layers is not None or (
            draft_file is not None and options.draft_gpu_layers is not None
        )
        if placed is not None and not asked:
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
            sequences=parallel,
        )
        loaded: list[HeadDraft | Model] = []  # in the order given
        try:
            for choice in choices:
                if isinstance(choice, Eagle3Head | MtpLayers):
                    head, rows = (
                        open_eagle3(choice.path, target)
                        if isinstance(choice, Eagle3Head)
                        else open_mtp(target)
                    )
                    loaded.append(HeadDraft(head, rows, target.n_vocab, p_min=drafting.p_min))
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
                        sequences=parallel,
                    )
                    loaded.append(draft_model)
                    check_compatible(target, draft_model)
        except BaseException:  # a bad draft, or Ctrl-C while one loads: free what was loaded
            for native in reversed(loaded):
                native.close() if isinstance(native, Model) else _close_draft(native)
            target.close()
            raise
        use_lookup = drafting.hybrid or any(isinstance(c, PromptLookup) for c in choices)
        gather = Gather()

        def source(seq_id: int) -> DraftSource | None:
            """The draft source of one sequence: its own lookup, its views of the draft models."""
            drafts = [
                ModelDraft(
                    native if parallel == 1 else SequenceView(native, seq_id, gather),
                    target.n_vocab,
                    p_min=drafting.p_min,
                )
                if isinstance(native, Model)
                else native
                for native in loaded
            ]
            lookup = drafting.lookup.draft() if use_lookup else None
            if drafts and (lookup or len(drafts) > 1):
                return HybridDraft(lookup, drafts)
            return drafts[0] if drafts else lookup

        sources = [source(seq_id) for seq_id in range(parallel)]
        engine = cls(
            target, sources[0], params=params, gamma=drafting.gamma, gamma_max=drafting.gamma_max
        )
        if parallel > 1:
            engine._open_slots(gather, sources)
        engine.layer_plan, engine.remotes = placed, remotes
        if placed is not None and asked:
            announce(f"layers as asked: {engine.placement().text()}")
        used = free_before - gpu_free_bytes() - rpc.free_bytes(remotes)
        engine.gpu_bytes_used = used if used > 0 else None
        if sources[0] is not None:
            engine._learned_key = engine._learned_settings(sources[0])
            engine.learned_path = learned.path_for(engine._learned_key)
            engine._recall()
        return engine

    def _open_slots(self, gather: Gather, sources: Sequence[DraftSource | None]) -> None:
        """One slot per sequence of the models, slot 0's draft and policy the engine's own."""
        self._gather = gather
        self.slots = [
            Slot(
                seq_id,
                SequenceView(self.target, seq_id, gather),
                source,
                self.policy if seq_id == 0 else self._policy(self.gamma_spec, source),
            )
            for seq_id, source in enumerate(sources)
        ]
        self._free = list(self.slots)

    def _recall(self) -> None:
        """Start every policy from what an earlier engine for this pair learned, if it did."""
        if self.learned_path is not None:
            policies = [self.policy, *(slot.policy for slot in self.slots[1:])]
            self.recalled = all([learned.load(policy, self.learned_path) for policy in policies])

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

    def _policy(self, spec: str, draft: DraftSource | None) -> GammaPolicy:
        """The γ policy `spec` names for a draft source; the hybrid's auto chooses its source
        per round too."""
        if isinstance(draft, HybridDraft):
            return draft.policy(spec, self.gamma_max)
        return parse_policy(spec, self.gamma_max)

    def set_gamma(self, spec: str) -> None:
        """Between generations (no slot busy)."""
        self.gamma_spec = spec
        self.policy = self._policy(spec, self.draft)
        for slot in self.slots:
            slot.policy = self.policy if slot.index == 0 else self._policy(spec, slot.draft)
        self._recall()

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
    ) -> Generator[Event, None, None]:
        """Generate from a text prompt (one user turn through the chat template) or token ids.

        `params` samples this generation alone; None takes the engine's own (`self.params`).
        `grammar` (GBNF; `JSON_GRAMMAR`, `schema_grammar(schema)`) constrains the answer:
        drafts and verification alike, so it is distributed as the constrained target's.
        `logprobs` (0-20): each Round carries its tokens' log-probabilities, with that many of
        the most likely tokens at each position.

        With `parallel` > 1, up to that many threads may stream at once: each generation takes a
        free slot when it starts (waiting for one), and its rounds are decoded together with
        the others'. Every stream must then be consumed or closed promptly: the others' rounds
        wait for its next model call.
        """
        tokens = self.prompt(prompt) if isinstance(prompt, str) else list(prompt)
        settings: dict[str, Any] = {
            "params": self.params if params is None else params,
            "max_tokens": max_tokens,
            "stop": stop,
            "cancelled": cancelled,
            "constraint": Grammar(self.target, grammar) if grammar is not None else None,
            "logprobs": logprobs,
        }
        if self.slots:
            return self._watched(self._in_slot(tokens, settings))
        return self._watched(
            generate(self.target, tokens, draft=self.draft, policy=self.policy, **settings)
        )

    def _watched(self, events: Generator[Event, None, None]) -> Generator[Event, None, None]:
        """The generation, with other programs' CPU use measured while it ran."""
        watch = Watch()
        with closing(events):
            yield from events
        self.contention = watch.stop(self.target.threads)
        self._slowed = self._slowed or (self.contention is not None and self.contention.slowed)

    def _in_slot(self, tokens: list[int], settings: dict[str, Any]) -> Generator[Event, None, None]:
        """A generation in the next free slot, a member of the gather while it runs."""
        slot = self._take_slot(tokens)
        try:
            events = generate(slot.target, tokens, draft=slot.draft, policy=slot.policy, **settings)
            with self._gather.member() as member, closing(events):
                for event in events:
                    with member.away():  # the others' rounds need not wait for the consumer
                        yield event
        finally:
            with self._slot_freed:
                self._free.append(slot)
                self._slot_freed.notify()

    def _take_slot(self, prompt: Sequence[int]) -> Slot:
        """The free slot whose cache holds the longest prefix of the prompt (the next turn of
        a conversation finds its own), else the one free longest; waiting for one."""
        with self._slot_freed:
            while not self._free:
                self._slot_freed.wait()
            slot = max(self._free, key=lambda s: common_prefix_length(s.target.tokens, prompt))
            self._free.remove(slot)
            return slot

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
        models = (_native(d.model) for d in self.drafts if isinstance(d, ModelDraft))
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
        if self.learned_path is not None and not self._slowed:
            learned.save(self.policy, self.learned_path, self._learned_key)
            self.learned_path = None  # closing twice saves once
        self._gather.close()
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
    native = (
        _native(source.model) if isinstance(source, ModelDraft) else getattr(source, "head", None)
    )
    if isinstance(native, Model | NativeHead):
        native.close()


def _native(model: object) -> object:
    """The Model a slot's view is a sequence of; anything else as it is."""
    return model.model if isinstance(model, SequenceView) else model


def _draft_settings(source: DraftSource) -> list[object]:
    """The draft source's own settings: what changes its proposals."""
    if isinstance(source, HybridDraft):
        sources = [*([source.lookup] if source.lookup else []), *source.drafts]
        return [setting for part in sources for setting in _draft_settings(part)]
    if isinstance(source, ModelDraft | HeadDraft):
        return [source.p_min]
    return [getattr(source, name, None) for name in ("ngram_min", "ngram_max", "max_tokens")]
