"""What `Engine.load` loads, in steps that each do one thing, in order: check the options,
connect the RPC servers, place the layers by free memory, load the target, load the drafts
(heads, block drafts and draft models), and make each slot's draft source. `Engine.load`
builds the engine whole from what they made (`Loaded`); `close_draft` frees a draft's native
half again."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from specrun.core.blocks import BlockDraft
from specrun.core.drafting import DraftSource, HybridDraft, ModelDraft
from specrun.core.heads import HeadDraft
from specrun.core.lookup import LookupDraft
from specrun.core.suffix import SuffixDraft, SuffixStore
from specrun.errors import OptionError
from specrun.llama import rpc
from specrun.llama.blocks import NativeBlock, open_block
from specrun.llama.compat import check_compatible
from specrun.llama.devices import gpu_free_bytes, gpu_handles
from specrun.llama.heads import NativeHead, open_eagle3, open_mtp
from specrun.llama.model import DEFAULT_CTX, Model
from specrun.llama.placement import Gpu, LayerPlan, plan_layers
from specrun.llama.slots import BlockView, Gather, HeadView, SequenceView
from specrun.options import (
    BlockDraftFile,
    DraftOptions,
    DraftSpec,
    Eagle3Head,
    LoadOptions,
    MtpLayers,
    PromptLookup,
    SuffixDecoding,
)

# A loaded draft with a native half, as `load_drafts` made it; each slot's source is made of it.
Native = HeadDraft | BlockDraft | Model


@dataclass(frozen=True)
class Loaded:
    """What loading made, each part of the Engine's: the target, the draft source of each slot
    (slot 0's first; one where `parallel` is 1), the gather their views meet in, and where the
    layers went."""

    target: Model
    sources: list[DraftSource | None]
    gather: Gather
    layer_plan: LayerPlan | None
    layers_asked: bool  # `gpu_layers` or `draft_gpu_layers` given: they win over the plan
    remotes: list[rpc.Remote]
    gpu_bytes_used: int | None  # measured; None where the GPUs' free memory did not move


def load_models(
    target_path: str | Path,
    draft: DraftSpec | Sequence[DraftSpec] | None,
    *,
    options: LoadOptions,
    drafting: DraftOptions,
    announce: Callable[[str], None],
) -> Loaded:
    """`Engine.load`'s models: its documentation says what each argument does."""
    choices = draft_choices(draft)
    check_parallel(options)
    check_free_sources(choices)
    remotes = rpc.connect(options.rpc) if options.rpc else []
    placed = place_layers(Path(target_path), choices, options, remotes)
    # `gpu_layers` and `draft_gpu_layers` win over the fit: its line is said where it holds.
    asked = options.gpu_layers is not None or (
        _draft_file(choices) is not None and options.draft_gpu_layers is not None
    )
    if placed is not None and not asked:
        announce(placed.line)
    free_before = gpu_free_bytes() + rpc.free_bytes(remotes)
    target = load_target(target_path, choices, options, placed, remotes)
    natives = load_drafts(target, choices, options, drafting, placed)
    gather = Gather()
    # One store of earlier answers for the engine's lifetime, shared by every slot's source.
    store = SuffixStore() if any(isinstance(c, SuffixDecoding) for c in choices) else None
    try:
        sources = [
            draft_source(
                target, natives, drafting, choices, options.parallel, seq_id, gather, store
            )
            for seq_id in range(options.parallel)
        ]
    except BaseException:  # a slot's head context that could not be made: free everything
        _close_all(target, natives)
        raise
    used = free_before - gpu_free_bytes() - rpc.free_bytes(remotes)
    return Loaded(target, sources, gather, placed, asked, remotes, used if used > 0 else None)


def draft_choices(draft: DraftSpec | Sequence[DraftSpec] | None) -> list[DraftSpec]:
    if draft is None:
        return []
    if isinstance(
        draft, str | Path | PromptLookup | SuffixDecoding | Eagle3Head | MtpLayers | BlockDraftFile
    ):
        return [draft]
    return list(draft)


def check_free_sources(choices: Sequence[DraftSpec]) -> None:
    """Prompt lookup or suffix drafts, not both: suffix drafts match the request's own text as
    lookup does, and earlier answers besides."""
    if any(isinstance(c, PromptLookup) for c in choices) and any(
        isinstance(c, SuffixDecoding) for c in choices
    ):
        raise OptionError(
            "suffix drafts match the request's own text as prompt lookup does: give `suffix` "
            "or `lookup`, not both"
        )


def check_parallel(options: LoadOptions) -> None:
    """`parallel`: at least one slot."""
    if options.parallel < 1:
        raise OptionError(f"`parallel` must be at least 1, got {options.parallel}")


def place_layers(
    target: Path, choices: Sequence[DraftSpec], options: LoadOptions, remotes: list[rpc.Remote]
) -> LayerPlan | None:
    """With `fit`, the layers placed by free memory (the RPC servers' devices first); None
    where there are no GPUs."""
    if not options.fit:
        return None
    remote_gpus = [
        Gpu(r.device.name, r.device.free_bytes, r.device.total_bytes, r.endpoint) for r in remotes
    ]
    n_ctx = options.n_ctx or DEFAULT_CTX
    return plan_layers(
        target,
        _draft_file(choices),
        n_ctx,
        remote_gpus,
        options.parallel,
        tuning=options.tuning,
        draft_tuning=options.draft_tuning,
    )


def load_target(
    path: str | Path,
    choices: Sequence[DraftSpec],
    options: LoadOptions,
    placed: LayerPlan | None,
    remotes: list[rpc.Remote],
) -> Model:
    return Model(
        path,
        n_ctx=options.n_ctx or DEFAULT_CTX,
        threads=options.threads,
        verbose=options.verbose,
        gpu_layers=_layers(options.gpu_layers, placed.target_layers if placed else None),
        split=placed.split if placed else None,
        reproducible=options.reproducible,
        devices=[r.handle for r in remotes] + gpu_handles() if remotes else None,
        load_mtp=any(isinstance(c, MtpLayers) for c in choices),
        backend_sampling=options.backend_sampling,
        sequences=options.parallel,
        tree_branches=_tree_branches(options),
        tuning=options.tuning,
    )


def _tree_branches(options: LoadOptions) -> int:
    """The branches a target verifies (core.trees): prompt lookup's and suffix drafts grow
    trees where they draft alone (`draft_source`), and `specrun bench` compares them."""
    if options.tree_branches < 1:
        raise OptionError(f"`tree_branches` must be at least 1, got {options.tree_branches}")
    if options.tree_branches == 1:
        return 0
    # A tree's branches are sequences of one slot's context, in one pool of cells: slots'
    # sequences, and reproducible decoding's shaped decodes, verify chains.
    if options.parallel > 1 or options.reproducible:
        asked, fix = (
            ("`reproducible`", "")
            if options.reproducible
            else (f"`parallel` {options.parallel}", "set `parallel` to 1, or ")
        )
        raise OptionError(
            f"`tree_branches` {options.tree_branches} verifies one sequence's trees, not with "
            f"{asked}: {fix}leave `tree_branches` at 1"
        )
    return options.tree_branches


def load_drafts(
    target: Model,
    choices: Sequence[DraftSpec],
    options: LoadOptions,
    drafting: DraftOptions,
    placed: LayerPlan | None,
) -> list[Native]:
    """The heads, block drafts and draft models, in the order given, each checked against the
    target; a bad draft, or Ctrl-C while one loads, frees what was loaded, the target too."""
    loaded: list[Native] = []
    try:
        for choice in choices:
            if isinstance(choice, Eagle3Head | MtpLayers):
                head, rows = (
                    open_eagle3(choice.path, target)
                    if isinstance(choice, Eagle3Head)
                    else open_mtp(target)
                )
                loaded.append(HeadDraft(head, rows, target.n_vocab, p_min=drafting.p_min))
            elif isinstance(choice, BlockDraftFile):
                block, rows = open_block(choice.path, target)
                loaded.append(BlockDraft(block, rows, target.n_vocab, p_min=drafting.p_min))
            elif not isinstance(choice, PromptLookup | SuffixDecoding):
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
                    sequences=options.parallel,
                    tuning=options.draft_tuning,
                )
                loaded.append(draft_model)
                check_compatible(target, draft_model)
    except BaseException:
        _close_all(target, loaded)
        raise
    return loaded


def _close_all(target: Model, natives: Sequence[Native]) -> None:
    for native in reversed(natives):
        native.close() if isinstance(native, Model) else close_draft(native)
    target.close()


def draft_source(
    target: Model,
    natives: Sequence[Native],
    drafting: DraftOptions,
    choices: Sequence[DraftSpec],
    parallel: int,
    seq_id: int,
    gather: Gather,
    store: SuffixStore | None = None,
) -> DraftSource | None:
    """The draft source of one sequence: its own prompt lookup or suffix drafts (over `store`,
    every slot's), its views of the draft models (the models themselves where there is one
    sequence), its own head or block draft over its own hidden rows (slot 0 the one loaded,
    the others its twins); several make the hybrid, the free source (lookup or suffix) asked
    first."""
    drafts = [
        ModelDraft(
            native if parallel == 1 else SequenceView(native, seq_id, gather),
            target.n_vocab,
            p_min=drafting.p_min,
        )
        if isinstance(native, Model)
        else _block_of(native, target, seq_id, parallel, gather)
        if isinstance(native, BlockDraft)
        else _head_of(native, target, seq_id, parallel, gather)
        for native in natives
    ]
    uses_lookup = drafting.hybrid or any(isinstance(c, PromptLookup) for c in choices)
    free: SuffixDraft | LookupDraft | None = (
        SuffixDraft(store)  # it matches the text as lookup does: `hybrid` asks for no more
        if store is not None
        else drafting.lookup.draft()
        if uses_lookup
        else None
    )
    if free is not None and not drafts and target.tree_branches > 1:  # alone: trees (`--tree`)
        free.leaves = target.tree_branches
    if drafts and (free or len(drafts) > 1):
        return HybridDraft(free, drafts)
    return drafts[0] if drafts else free


def _head_of(
    loaded: HeadDraft, target: Model, seq_id: int, parallel: int, gather: Gather
) -> HeadDraft:
    """Sequence `seq_id`'s head: where there are several slots, each drafts with a head of its
    own (slot 0 the one loaded, the others its twins) over its sequence's hidden rows, its
    passes run in the gather's thread."""
    if parallel == 1:
        return loaded
    assert isinstance(loaded.head, NativeHead)  # as open_eagle3 and open_mtp made it
    head = loaded.head if seq_id == 0 else loaded.head.twin()
    rows = target.sequence_rows(seq_id, loaded.rows)
    return HeadDraft(HeadView(head, gather), rows, loaded.target_vocab, p_min=loaded.p_min)


def _block_of(
    loaded: BlockDraft, target: Model, seq_id: int, parallel: int, gather: Gather
) -> BlockDraft:
    """Sequence `seq_id`'s block draft, as `_head_of` makes its head: a context of its own on
    the loaded weights, over its sequence's hidden rows, its passes in the gather's thread."""
    if parallel == 1:
        return loaded
    assert isinstance(loaded.block, NativeBlock)  # as open_block made it
    block = loaded.block if seq_id == 0 else loaded.block.twin()
    rows = target.sequence_rows(seq_id, loaded.rows)
    return BlockDraft(BlockView(block, gather), rows, loaded.target_vocab, p_min=loaded.p_min)


def _draft_file(choices: Sequence[DraftSpec]) -> Path | None:
    """The first draft model's file, which the placement makes room for."""
    return next((Path(c) for c in choices if isinstance(c, str | Path)), None)


def _layers(asked: int | None, fitted: int | None) -> int | None:
    """--gpu-layers wins over the fit; None leaves llama.cpp's all-layers default to the runtime."""
    return asked if asked is not None else fitted


def close_draft(source: DraftSource) -> None:
    """Free a draft model's, a head's or a block draft's native half (prompt lookup has none)."""
    if isinstance(source, ModelDraft):
        native = native_model(source.model)
    elif isinstance(source, BlockDraft):
        native = native_block(source.block)
    else:
        native = native_head(getattr(source, "head", None))
    if isinstance(native, Model | NativeHead | NativeBlock):
        native.close()


def native_head(head: object) -> object:
    """The head a slot's view runs; anything else as it is."""
    return head.head if isinstance(head, HeadView) else head


def native_block(block: object) -> object:
    """The block draft a slot's view runs; anything else as it is."""
    return block.block if isinstance(block, BlockView) else block


def native_model(model: object) -> object:
    """The Model a slot's view is a sequence of; anything else as it is."""
    return model.model if isinstance(model, SequenceView) else model
