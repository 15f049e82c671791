"""The library entry point: a loaded target (and draft) that streams generations as events.

import specrun
with specrun.Engine.load("target.gguf", "draft.gguf") as engine:
    for event in engine.stream("Write a haiku", max_tokens=64):
        if isinstance(event, specrun.Round):
            print(event.text, end="", flush=True)
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import llama_cpp

from specrun.core import learned
from specrun.core.blocks import BlockDraft
from specrun.core.drafting import (
    DraftSource,
    HybridDraft,
    ModelDraft,
    gamma_max_for,
    policy_for,
)
from specrun.core.gamma import GAMMA_MAX, GammaPolicy
from specrun.core.heads import HeadDraft
from specrun.core.loop import Event, GenerationSettings, generate_with
from specrun.core.sampling import Draws, SamplingParams
from specrun.core.sequence import common_prefix_length
from specrun.core.suffix import (
    MAX_DEPTH,
    MIN_PROBABILITY,
    SPEC_FACTOR,
    SuffixDraft,
    SuffixStore,
    remembering,
    suffix_part,
)
from specrun.errors import OptionError
from specrun.llama import rpc
from specrun.llama.grammar import Grammar
from specrun.llama.heads import NativeHead
from specrun.llama.model import Model, SequenceCache
from specrun.llama.placement import LayerPlan, Placement
from specrun.llama.prompt_cache import Holder, PromptCache
from specrun.llama.slots import Gather, Job, SequenceView
from specrun.loading import close_draft, load_models, native_head, native_model
from specrun.options import DraftOptions, DraftSpec, LoadOptions
from specrun.prompt import prompt_tokens
from specrun.slots import Slot, Slots
from specrun.suffix_file import load_store, save_store
from specrun.system.busy import Contention, Watch


class Engine:
    """A target model, an optional draft source, sampling settings and a γ policy.

    The policy lives as long as the engine, so what it measured in one generation
    (acceptance, costs) carries over to the next turn of a conversation. With `keep_learned`
    (as `load` makes it) an engine also starts `auto` from what an earlier engine for the same
    pair and settings learned, and leaves what it learned for the next (specrun.core.learned).
    `load` builds it (specrun.loading); made directly, `Engine(model, draft)`, it is one
    generation at a time.
    """

    def __init__(
        self,
        target: Model,
        draft: DraftSource | None = None,
        *,
        params: SamplingParams = SamplingParams(),
        gamma: str = "auto",
        gamma_max: int = GAMMA_MAX,
        slot_drafts: Sequence[DraftSource | None] = (),
        gather: Gather | None = None,
        layer_plan: LayerPlan | None = None,
        remotes: Sequence[rpc.Remote] = (),
        gpu_bytes_used: int | None = None,
        keep_learned: bool = False,
        prompt_cache: PromptCache | None = None,
    ) -> None:
        """`slot_drafts`: the draft source of each slot but the first (whose is `draft`), for
        `parallel` > 1; `gather`: the one their draft models' views were made with.
        `layer_plan`: the placement by free memory, where there were GPUs; `remotes`: the RPC
        servers' devices the target's layers may use; `gpu_bytes_used`: what loading took from
        the GPUs' free memory, measured (None where it did not move: a device that reports no
        budget, as Mesa's lavapipe). `prompt_cache`: where a slot's prompt is saved before
        another conversation takes the slot, and restored from (specrun.llama.prompt_cache);
        None keeps none."""
        self.target = target
        self.draft = draft
        self.params = params
        self.gamma_max = gamma_max
        self.gamma_spec = gamma
        self.policy: GammaPolicy = self._policy(gamma, draft)
        self.layer_plan = layer_plan
        self.remotes = list(remotes)
        self.gpu_bytes_used = gpu_bytes_used
        self.prompt_cache = prompt_cache
        # With `parallel` > 1: the slots, and the gate a generation takes one through.
        self.slots: Slots | None = (
            self._open_slots(gather or Gather(), [draft, *slot_drafts]) if slot_drafts else None
        )
        # Where auto's learned state is kept, if it is, and the settings that path is named by.
        self._learned_key = (
            self._learned_settings(draft) if keep_learned and draft is not None else {}
        )
        self.learned_path: Path | None = (
            learned.path_for(self._learned_key) if self._learned_key else None
        )
        self.recalled = False  # whether auto started from that state rather than its warm-up
        self.suffix_file: Path | None = None  # where the suffix store is kept (`load`), if it is
        # Other programs' CPU use over the last generation that ran to its end (None: not
        # measured); costs measured while they slowed one are not kept for the next engine.
        self.contention: Contention | None = None
        self._slowed = False
        self._recall()

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
        prompt_cache: PromptCache | None = None,
    ) -> Engine:
        """Load the target and the draft and check that the draft can serve the target.

        `draft` is a draft model's GGUF file, `PROMPT_LOOKUP` for prompt lookup, `SUFFIX` for
        suffix drafts (the request's text and earlier answers, specrun.core.suffix), an
        `Eagle3Head` made for the target, `MTP_LAYERS` for the target's own MTP layers, a
        `BlockDraftFile` (a DFlash or DSpark draft made for the target), or several of them:
        several sources (or one with
        `drafting.hybrid`, which adds prompt lookup) make the hybrid, whose auto picks the
        source that pays each round.
        With GPUs, the layers are placed by free memory first (`specrun.llama.placement`), and
        `announce` hears the one line that says where they went. `options.rpc` adds RPC
        servers' devices for the target, ahead of this machine's GPUs (specrun.llama.rpc).
        `prompt_cache`: where prompts are kept in host memory across slots and requests.
        """
        loaded = load_models(
            target_path, draft, options=options, drafting=drafting, announce=announce
        )
        engine = cls(
            loaded.target,
            loaded.sources[0],
            params=params,
            gamma=drafting.gamma,
            gamma_max=gamma_max_for(loaded.sources[0], drafting.gamma_max),
            slot_drafts=loaded.sources[1:],
            gather=loaded.gather,
            layer_plan=loaded.layer_plan,
            remotes=loaded.remotes,
            gpu_bytes_used=loaded.gpu_bytes_used,
            keep_learned=True,
            prompt_cache=prompt_cache,
        )
        if loaded.layer_plan is not None and loaded.layers_asked:
            announce(f"layers as asked: {engine.placement().text()}")
        engine.suffix_file = drafting.suffix_file
        if engine.suffix_file is not None:
            if engine.suffix_store is None:
                engine.close()
                raise OptionError(
                    "`suffix_file` keeps suffix drafts' earlier answers: draft `suffix` with it"
                )
            try:
                kept = load_store(engine.suffix_store, engine.target, engine.suffix_file)
            except BaseException:
                engine.suffix_file = None  # what it holds stays as it is
                engine.close()
                raise
            announce(f"suffix store: {kept} earlier answers from {engine.suffix_file}")
        return engine

    @property
    def parallel(self) -> int:
        """Generations at once: the slots, or one."""
        return len(self.slots) if self.slots else 1

    def _open_slots(self, gather: Gather, sources: Sequence[DraftSource | None]) -> Slots:
        """One slot per sequence of the models, slot 0's draft and policy the engine's own."""
        return Slots(
            [
                Slot(
                    seq_id,
                    SequenceView(self.target, seq_id, gather),
                    source,
                    self.policy if seq_id == 0 else self._policy(self.gamma_spec, source),
                )
                for seq_id, source in enumerate(sources)
            ],
            gather,
        )

    def _recall(self) -> None:
        """Start every policy from what an earlier engine for this pair learned, if it did."""
        if self.learned_path is not None:
            policies = [slot.policy for slot in self.slots] if self.slots else [self.policy]
            self.recalled = all([learned.load(policy, self.learned_path) for policy in policies])

    def _learned_settings(self, draft: DraftSource) -> dict[str, object]:
        """What the costs and acceptance that auto learns depend on."""
        models = [self.target, *self.draft_models]
        heads = [
            getattr(d.head if isinstance(d, HeadDraft) else d.block, "path", None)
            for d in self.drafts
            if isinstance(d, HeadDraft | BlockDraft)
        ]
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
        """The γ policy `spec` names for a draft source, of its shape (`policy_for`)."""
        return policy_for(draft, spec, self.gamma_max)

    def set_gamma(self, spec: str) -> None:
        """Between generations (no slot busy)."""
        self.gamma_spec = spec
        self.policy = self._policy(spec, self.draft)
        for slot in self.slots or ():
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
        rng: Draws | None = None,
        tenant: str | None = None,
        shown: Sequence[str] = (),
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

        `tenant`: whose earlier answers suffix drafts may draft from, and whose this answer
        joins when it ends (`specrun.core.suffix.remembering`); None is the process's default
        tenant. It changes only the speed, never the answer.

        `shown`: special tokens' texts (a template's call marks) that the answer's text keeps,
        where the model's vocabulary renders them as nothing.
        """
        tokens = self.prompt(prompt) if isinstance(prompt, str) else list(prompt)
        settings = GenerationSettings(
            params=self.params if params is None else params,
            max_tokens=max_tokens,
            stop=stop,
            cancelled=cancelled,
            constraint=Grammar(self.target, grammar) if grammar is not None else None,
            logprobs=logprobs,
            shown=self.target.shown_specials(shown),
        )
        if self.slots:
            return self._watched(self._in_slot(self.slots, tokens, settings, rng, tenant))
        return self._watched(self._alone(tokens, settings, rng, tenant))

    def _alone(
        self, tokens: list[int], settings: GenerationSettings, rng: Draws | None, tenant: str | None
    ) -> Generator[Event, None, None]:
        """A generation on the engine's one sequence."""
        self._take_prompt(_holders(self.target, self.target.caches[0], self.draft), tokens)
        events = generate_with(
            self.target, tokens, settings, draft=self.draft, policy=self.policy, rng=rng
        )
        yield from remembering(events, self.draft, tenant)

    def _take_prompt(self, holders: list[Holder], prompt: Sequence[int]) -> None:
        """Before a generation of `prompt` in the sequences `holders`: save what they hold to
        the prompt cache where the prompt drops most of it, and restore the saved prompt that
        holds more of it than the KV cache does, if any (`PromptCache.take`)."""
        if self.prompt_cache is None:
            return
        target, cache = holders[0]
        others = [c for c in target.caches if c is not cache] if target.shared_pool else []
        held = max((common_prefix_length(c.tokens, prompt) for c in others), default=0)
        self.prompt_cache.take(holders, prompt, held)

    def _watched(self, events: Generator[Event, None, None]) -> Generator[Event, None, None]:
        """The generation, with other programs' CPU use measured while it ran."""
        watch = Watch()
        with closing(events):
            yield from events
        self.contention = watch.stop(self.target.threads)
        self._slowed = self._slowed or (self.contention is not None and self.contention.slowed)

    def _in_slot(
        self,
        slots: Slots,
        tokens: list[int],
        settings: GenerationSettings,
        rng: Draws | None,
        tenant: str | None,
    ) -> Generator[Event, None, None]:
        """A generation in the next free slot, a member of the gather while it runs."""
        with slots.held(tokens) as (slot, member):
            if self.prompt_cache is not None:  # in the decoding thread: other slots decode
                holders = _holders(slot.target.model, slot.target.cache, slot.draft)
                slots.gather.run(Job(lambda: self._take_prompt(holders, tokens)))
            events = remembering(
                generate_with(
                    slot.target, tokens, settings, draft=slot.draft, policy=slot.policy, rng=rng
                ),
                slot.draft,
                tenant,
            )
            with closing(events):
                for event in events:
                    with member.away():  # the others' rounds need not wait for the consumer
                        yield event

    @property
    def rpc_servers(self) -> list[str]:
        return list(dict.fromkeys(remote.endpoint for remote in self.remotes))

    @property
    def drafts(self) -> list[DraftSource]:
        """The draft models', heads' and block drafts' sources (inside the hybrid, if it is one)."""
        if isinstance(self.draft, HybridDraft):
            return list(self.draft.drafts)
        return [self.draft] if isinstance(self.draft, ModelDraft | HeadDraft | BlockDraft) else []

    @property
    def suffix_store(self) -> SuffixStore | None:
        """The earlier answers suffix drafts draft from, every slot's; None without them."""
        suffix = suffix_part(self.draft)
        return suffix.store if suffix is not None else None

    @property
    def draft_models(self) -> list[Model]:
        models = (native_model(d.model) for d in self.drafts if isinstance(d, ModelDraft))
        return [m for m in models if isinstance(m, Model)]

    @property
    def draft_model(self) -> Model | None:
        """The (first) draft model."""
        return next(iter(self.draft_models), None)

    @property
    def head(self) -> NativeHead | None:
        """The (first) EAGLE-3 head or MTP layers that draft."""
        heads = (native_head(d.head) for d in self.drafts if isinstance(d, HeadDraft))
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
        if self.suffix_file is not None and self.suffix_store is not None:
            save_store(self.suffix_store, self.target, self.suffix_file)
            self.suffix_file = None  # closing twice saves once
        if self.learned_path is not None and not self._slowed:
            learned.save(self.policy, self.learned_path, self._learned_key)
            self.learned_path = None  # closing twice saves once
        if self.slots:
            self.slots.close()
        if self.prompt_cache is not None:
            self.prompt_cache.forget(self.target)
        for draft in self.drafts:  # before the target, whose context a head or block uses
            close_draft(draft)
        self.target.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _holders(target: Model, cache: SequenceCache, draft: DraftSource | None) -> list[Holder]:
    """A slot's sequences: the target's, then each draft model's (a head's or a block draft's
    state is the target's hidden rows, which start over after a restore)."""
    holders: list[Holder] = [(target, cache)]
    sources = draft.drafts if isinstance(draft, HybridDraft) else [draft]
    for source in sources:
        if isinstance(source, ModelDraft):
            model = source.model
            if isinstance(model, SequenceView):
                holders.append((model.model, model.cache))
            elif isinstance(model, Model):
                holders.append((model, model.caches[0]))
    return holders


def _draft_settings(source: DraftSource) -> list[object]:
    """The draft source's own settings: what changes its proposals."""
    if isinstance(source, HybridDraft):
        sources = [*([source.lookup] if source.lookup else []), *source.drafts]
        return [setting for part in sources for setting in _draft_settings(part)]
    if isinstance(source, ModelDraft | HeadDraft | BlockDraft):
        return [source.p_min]
    if isinstance(source, SuffixDraft):
        return [MAX_DEPTH, SPEC_FACTOR, MIN_PROBABILITY]
    return [getattr(source, name, None) for name in ("ngram_min", "ngram_max", "max_tokens")]
