"""What every command shares: the options, declared once in groups that each build one
typed object, the way from --target/--draft to files, and the pair loading.

A command takes a group by naming its keyword; `@takes(...)` adds the group's options
to the command's signature (so Typer shows them) and hands the command the object the
group builds:

    @app.command()
    @takes(MODELS, LOAD)
    def bench(..., models: ModelChoice, load: LoadOptions) -> None: ...
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast, get_args

import typer

from specrun.cli.helptext import (
    DRAFTING_PANEL,
    MODEL_PANEL,
    OUTPUT_PANEL,
    PERFORMANCE_PANEL,
    SAMPLING_PANEL,
)
from specrun.core.model import BackendSampling
from specrun.core.sampling import SamplingParams
from specrun.errors import OptionError
from specrun.llama.model import DEFAULT_CTX
from specrun.llama.placement import Placement
from specrun.llama.tuning import (
    CACHE_TYPES,
    CacheType,
    CacheTypes,
    FlashAttention,
    Rope,
    RopeScalingType,
    Tuning,
)
from specrun.models.demo import demo_paths
from specrun.options import (
    MTP_LAYERS,
    PROMPT_LOOKUP,
    SUFFIX,
    BlockDraftFile,
    DraftChoice,
    DraftOptions,
    Eagle3Head,
    LoadOptions,
    LookupOptions,
)
from specrun.system.numerals import DECIMAL, WHOLE, whole_number
from specrun.system.textio import argument_text, read_stdin

if TYPE_CHECKING:
    from specrun.engine import Engine
    from specrun.llama.model import Model
    from specrun.models.catalog import Catalog
    from specrun.system.busy import Contention

F = TypeVar("F", bound=Callable[..., Any])

# Catalog aliases of the embedded pair and of the head `make head` trains for its target.
DEMO_TARGET, DEMO_DRAFT, DEMO_HEAD = "demo-target", "demo-draft", "demo-head"
LOOKUP = "lookup"  # the --draft value for prompt lookup without a draft model
SUFFIX_DRAFTS = "suffix"  # the --draft value for suffix drafts (the text and earlier answers)
MTP = "mtp"  # the --draft value for the target's own MTP layers
EAGLE3_PREFIX = "eagle3:"  # --draft eagle3:HEAD, an EAGLE-3 head (alias or file) for the target
# --draft dflash:FILE or dspark:FILE, a block draft: either names it, the file says which it is.
BLOCK_PREFIXES = ("dflash:", "dspark:")

# The library names its options in backquotes (`n_ctx`); the command line shows its flags.
FLAGS = {
    "n_ctx": "--ctx",
    "temperature": "--temp",
    "top_k": "--top-k",
    "top_p": "--top-p",
    "min_p": "--min-p",
    "seed": "--seed",
    "repeat_penalty": "--repeat-penalty",
    "presence_penalty": "--presence-penalty",
    "frequency_penalty": "--frequency-penalty",
    "penalty_last_n": "--repeat-last-n",
    "logit_bias": "--logit-bias",
    "backend_sampling": "--backend-sampling",
    "max_tokens": "--max-tokens",
    "gamma": "--gamma",
    "gamma_max": "--gamma-max",
    "ngram": "--lookup-ngram",
    "min_ngram": "--lookup-min",
    "raw": "--raw",
    "threads": "--threads",
    "gpu_layers": "--gpu-layers",
    "draft_gpu_layers": "--draft-gpu-layers",
    "rpc": "--rpc",
    "tree_branches": "--tree",
    "parallel": "--parallel",
    "reproducible": "--reproducible",
    "suffix_file": "--suffix-store",
    "cache_type_k": "--cache-type-k",
    "cache_type_v": "--cache-type-v",
    "flash_attn": "--flash-attn",
    "threads_batch": "--threads-batch",
    "rope_scaling": "--rope-scaling",
    "rope_scale": "--rope-scale",
    "rope_freq_base": "--rope-freq-base",
    "rope_freq_scale": "--rope-freq-scale",
    "yarn_orig_ctx": "--yarn-orig-ctx",
}


def in_flag_terms(message: str) -> str:
    return re.sub(r"`(\w+)`", lambda m: FLAGS.get(m.group(1), m.group(0)), message)


def note(message: str) -> None:
    """A status line for the user, on stderr."""
    print(f"specrun: {message}", file=sys.stderr, flush=True)


# --- option groups -------------------------------------------------------------------------


@dataclass(frozen=True)
class OptionGroup:
    """Options that build one typed object: declared once, shared by the commands that take it."""

    keyword: str  # the parameter the command receives the object as
    options: dict[str, tuple[Any, Any]]  # parameter -> (type, typer.Option(...))
    build: Callable[..., Any]  # called with the options' values as keywords
    panel: str | None = None  # --help's group for those options that name none

    def __post_init__(self) -> None:
        for _, option in self.options.values():
            if option.rich_help_panel is None:
                option.rich_help_panel = self.panel


def takes(*groups: OptionGroup) -> Callable[[F], F]:
    """Give a command these groups' options; it receives each group's object instead."""

    def decorate(command: F) -> F:
        signature = inspect.signature(command)
        own = [
            p for name, p in signature.parameters.items() if name not in {g.keyword for g in groups}
        ]
        added = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
            for group in groups
            for name, (kind, option) in group.options.items()
        ]

        @functools.wraps(command)
        def wrapper(**values: Any) -> Any:
            built = {
                g.keyword: g.build(**{name: values.pop(name) for name in g.options}) for g in groups
            }
            return command(**values, **built)

        wrapper.__signature__ = signature.replace(parameters=own + added)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


@dataclass(frozen=True)
class ModelChoice:
    """The files --target and --draft name (or prompt lookup, a head, MTP for a draft)."""

    target: Path
    draft: OneDraft | tuple[OneDraft, ...] | None  # several: the hybrid over them
    # Without --draft: the line that says which draft stands for it, once the models load.
    default_note: str | None = None

    @property
    def drafts(self) -> tuple[OneDraft, ...]:
        if self.draft is None:
            return ()
        return self.draft if isinstance(self.draft, tuple) else (self.draft,)

    @property
    def draft_label(self) -> str | None:
        """The draft as a person reads it: the file's name, or `lookup`, `suffix`, `eagle3:FILE`,
        `mtp`, `dflash:FILE` (several: separated by commas)."""
        return ",".join(map(_draft_label, self.drafts)) or None

    @property
    def draft_spec(self) -> str | None:
        """The draft as --draft would name it, files by their full paths."""
        return ",".join(str(d) if isinstance(d, Path) else d.spec for d in self.drafts) or None


# A draft model's file, prompt lookup, suffix drafts, an EAGLE-3 head, MTP layers, a block draft.
OneDraft = Path | DraftChoice


def _draft_label(draft: OneDraft) -> str:
    if isinstance(draft, Path):
        return draft.name
    if isinstance(draft, Eagle3Head | BlockDraftFile):  # the file's name, after its kind
        return f"{draft.spec.partition(':')[0]}:{draft.path.name}"
    return draft.spec


@dataclass(frozen=True)
class ModelRequest:
    """--target, --draft and --catalog as given; `resolve` may download."""

    target: str | None
    draft: str | None
    catalog: Path | None

    def resolve(self, *, free: str | None = LOOKUP) -> ModelChoice:
        """Without --target: the embedded demo pair. Without --draft: the best draft at hand
        (`default_draft`), with the `free` source (prompt lookup, or `suffix` where earlier
        answers are at hand: a server's) unless it is None (bench compares them as modes of
        their own); `--draft none`: the target alone. `--draft lookup` is prompt
        lookup, which needs no file, and `--draft suffix` suffix drafts (the request's text
        and this process's earlier answers); `--draft mtp` the target's own MTP layers;
        `--draft eagle3:HEAD` an EAGLE-3 head (an alias or a file), and
        `--draft eagle3` the catalog's head for the target (a published checkpoint is
        converted to GGUF on first use); `--draft dflash:FILE` (or `dspark:FILE`) a block
        draft. Several, separated by commas (`-d MODEL,eagle3:HEAD`), make the hybrid, whose
        auto picks among them per round."""
        from specrun.models.catalog import (
            load_catalog,
            resolve_head_pair,
            resolve_pair,
            resolve_target,
        )

        models = load_catalog(self.catalog)
        target, draft = self.target, self.draft
        if target is not None and whole_number(target) is not None and not Path(target).exists():
            raise OptionError(
                f"-t/--target takes a model, not the number {target}: llama.cpp's -t (threads) "
                f"is --threads here (--threads {target})"
            )
        if target is not None and draft is None:
            draft, line = default_draft(target, models, free=free)
            return replace(replace(self, draft=draft).resolve(), default_note=line)
        if draft and "," in draft and not Path(draft).is_file():  # several: the hybrid over them
            parts = comma_list(draft, "--draft")
            target = target or DEMO_TARGET
            if target == DEMO_TARGET and self.target is None:
                note("no --target given: using the demo target (SmolLM2-135M-Instruct, F16)")
            chosen = [replace(self, target=target, draft=part).resolve() for part in parts]
            drafts = tuple(d for choice in chosen for d in choice.drafts)
            _check_distinct(drafts)
            return ModelChoice(chosen[0].target, drafts if len(drafts) > 1 else drafts[0])
        if target is None:
            if draft is None:  # the demo's draft: its trained head where `make head` made one
                draft = f"{EAGLE3_PREFIX}{DEMO_HEAD}" if demo_paths()[2].is_file() else DEMO_DRAFT
            target = DEMO_TARGET
            using = {
                DEMO_DRAFT: "pair (SmolLM2-135M-Instruct, F16 target, Q4_0 draft)",
                f"{EAGLE3_PREFIX}{DEMO_HEAD}": (
                    "target (SmolLM2-135M-Instruct, F16) with its EAGLE-3 head from `make head`"
                ),
            }.get(draft, "target (SmolLM2-135M-Instruct, F16)")
            note(f"no --target given: using the demo {using}")
        if draft in (None, "none", LOOKUP, SUFFIX_DRAFTS, MTP):
            resolved = resolve_target(target, catalog=models)
            choices: dict[str | None, DraftChoice] = {
                LOOKUP: PROMPT_LOOKUP,
                SUFFIX_DRAFTS: SUFFIX,
                MTP: MTP_LAYERS,
            }
            return ModelChoice(resolved.path, choices.get(draft))
        if draft == EAGLE3_PREFIX.rstrip(":") or draft.startswith(EAGLE3_PREFIX):
            # No HEAD (`eagle3`, `eagle3:`) is the catalog's head for the target. The head is
            # fetched (or converted) first: the smaller download, so a problem shows sooner.
            head_name = draft.partition(":")[2]
            resolved, head = resolve_head_pair(target, head_name, catalog=models)
            return ModelChoice(resolved.path, Eagle3Head(head.path))
        if draft.startswith(BLOCK_PREFIXES) or f"{draft}:" in BLOCK_PREFIXES:
            return _block_choice(target, draft.partition(":")[2], models)
        resolved_target, resolved_draft = resolve_pair(target, draft, catalog=models)
        return ModelChoice(resolved_target.path, resolved_draft.path)


def default_draft(target: str, models: Catalog, *, free: str | None = LOOKUP) -> tuple[str, str]:
    """The --draft value that stands for no --draft, and the line that says so: the target's
    first catalog draft already on disk (`draft_at_hand`; none is ever downloaded unasked), in
    the hybrid with the `free` source (prompt lookup, or suffix drafts); else that source
    alone, which costs nothing and pays wherever the answer repeats the prompt or an earlier
    answer (without a `free` source: `none`)."""
    from specrun.models.catalog import catalog_target, draft_at_hand, parse_spec

    entry = catalog_target(parse_spec(target, models), models)
    at_hand = draft_at_hand(entry, models) if entry is not None else None
    plain = "-d none: plain decoding"
    words = {LOOKUP: "prompt lookup", SUFFIX_DRAFTS: "suffix drafts"}
    if entry is not None and at_hand is not None:
        draft = f"{at_hand.draft},{free}" if free else at_hand.draft
        beside = f" and {words[free]}" if free else ""
        return draft, (
            f"drafting with {at_hand.alias}{beside} (-d {draft}): the catalog's {at_hand.noun} "
            f"for {entry.alias}, on disk; {plain}"
        )
    offered = [*entry.drafts, *models.heads_for(entry), *models.blocks_for(entry)] if entry else []
    why = (
        f"{target} is not a catalog model"
        if entry is None
        else f"no catalog draft for {entry.alias} is on disk (`specrun models pull "
        f"{offered[0]}` fetches one)"
        if offered
        else f"the catalog pairs no draft with {entry.alias}"
    )
    if not free:
        return "none", f"no draft model: {why}"
    return free, f"drafting with {words[free]} (-d {free}): {why}; {plain}"


def _block_choice(target: str, name: str, models: Catalog) -> ModelChoice:
    """`--draft dflash:NAME` (or `dspark:NAME`): the target, and the block draft NAME, a catalog
    alias (a published checkpoint converted on first use) or a file; without NAME the catalog's
    block draft for the target. The loader reads its kind and fit from the file (`open_block`)."""
    from specrun.models.catalog import resolve_block_pair
    from specrun.models.hub import ModelNotFound
    from specrun.system.files import MISSING, REGULAR_FILE, what_is

    if name and models.get(name) is None:  # not an alias: a file
        kind = what_is(Path(name).expanduser())
        if kind == MISSING:
            raise ModelNotFound(
                f"no block draft {name}: no such file, nor a catalog alias "
                "(`specrun models list` shows the block drafts)"
            )
        if kind != REGULAR_FILE:
            raise ModelNotFound(f"no block draft {name}: it is {kind}")
    # The block draft is fetched (or converted) first: the smaller download, so a problem
    # with it shows sooner.
    resolved, block = resolve_block_pair(target, name, catalog=models)
    return ModelChoice(resolved.path, BlockDraftFile(block.path))


def comma_list(text: str, option: str) -> list[str]:
    """The items of a comma-separated option, stripped; an empty one is a mistake (`-d ,`,
    `--modes ''`, `a,,b`), never an item left out."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise OptionError(
            f"{option} has an empty item: {text!r}" if text.strip() else f"{option} is empty"
        )
    return items


def _check_distinct(drafts: tuple[OneDraft, ...]) -> None:
    """The hybrid picks among different drafts: the same one twice is a mistake."""
    seen: set[object] = set()
    for draft in drafts:
        key: object = draft
        if isinstance(draft, Path):
            key = draft.resolve()
        elif isinstance(draft, BlockDraftFile):  # dflash: and dspark: name the same file
            key = BlockDraftFile(draft.path.resolve())
        if key in seen:
            raise OptionError(f"--draft names {_draft_label(draft)} twice")
        seen.add(key)


def _sampling(
    temp: float,
    top_k: int,
    top_p: float,
    min_p: float,
    seed: int | None,
    repeat_penalty: float,
    presence_penalty: float,
    frequency_penalty: float,
    repeat_last_n: int,
    logit_bias: list[str],
) -> SamplingParams:
    return SamplingParams(
        temperature=temp,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        seed=seed,
        repeat_penalty=repeat_penalty,
        presence_penalty=presence_penalty,
        frequency_penalty=frequency_penalty,
        penalty_last_n=repeat_last_n,
        logit_bias=tuple(_bias(text) for text in logit_bias),
    )


def _bias(text: str) -> tuple[int, float]:
    """llama.cpp's TOKEN_ID(+/-)BIAS: 15043+1, 15043-1.5 (ASCII digits)."""
    match = re.fullmatch(rf"\s*({WHOLE})\s*([+-])\s*({DECIMAL})\s*", text)
    if not match:
        raise OptionError(f"--logit-bias takes TOKEN_ID+BIAS or TOKEN_ID-BIAS, got {text!r}")
    return int(match.group(1)), float(match.group(2) + match.group(3))


def _lookup(lookup_ngram: int, lookup_min: int, lookup_max: int) -> LookupOptions:
    return LookupOptions(lookup_ngram, lookup_min, lookup_max)


def _drafting(
    gamma: str,
    gamma_max: int | None,
    p_min: float,
    lookup: bool,
    lookup_ngram: int,
    lookup_min: int,
    lookup_max: int,
    suffix_store: Path | None = None,
) -> DraftOptions:
    from specrun.core.gamma import GAMMA_MAX, parse_policy

    # Checked now, before any work; the engine makes its own.
    parse_policy(gamma, GAMMA_MAX if gamma_max is None else gamma_max)
    return DraftOptions(
        gamma=gamma,
        gamma_max=gamma_max,
        p_min=p_min,
        lookup=_lookup(lookup_ngram, lookup_min, lookup_max),
        hybrid=lookup,
        suffix_file=suffix_store,
    )


def _load(
    ctx: int | None,
    gpu_layers: int | None,
    draft_gpu_layers: int | None,
    fit: str,
    threads: int | None,
    verbose: bool,
    reproducible: bool,
    rpc: str | None,
    backend_sampling: str,
    tree: int,
    cache_type_k: str,
    cache_type_v: str,
    cache_type_k_draft: str | None,
    cache_type_v_draft: str | None,
    flash_attn: str,
    mmap: bool,
    mlock: bool,
    threads_batch: int | None,
    rope_scaling: str | None,
    rope_scale: float | None,
    rope_freq_base: float | None,
    rope_freq_scale: float | None,
    yarn_orig_ctx: int | None,
) -> LoadOptions:
    from specrun.llama.devices import gpu_offload_supported
    from specrun.llama.rpc import parse_endpoints
    from specrun.system.cpus import choose_threads

    if threads is not None:
        threads, capped = choose_threads(threads)
        if capped:
            note(in_flag_terms(capped))
    if (gpu_layers or draft_gpu_layers) and not gpu_offload_supported() and not rpc:
        note(
            "--gpu-layers is ignored: this llama.cpp build has no GPU backend "
            "(see `specrun doctor`)"
        )
    if fit not in ("on", "off"):
        raise OptionError(f"--fit must be on or off, got {fit!r}")
    if backend_sampling not in get_args(BackendSampling):
        raise OptionError(f"--backend-sampling must be auto, on or off, got {backend_sampling!r}")
    return LoadOptions(
        n_ctx=ctx,
        gpu_layers=gpu_layers,
        draft_gpu_layers=draft_gpu_layers,
        fit=fit == "on",
        threads=threads,
        verbose=verbose,
        reproducible=reproducible,
        rpc=parse_endpoints(rpc) if rpc is not None else (),
        backend_sampling=cast(BackendSampling, backend_sampling),
        tree_branches=tree,
        tuning=_tuning(
            CacheTypes(cast(CacheType, cache_type_k), cast(CacheType, cache_type_v)),
            flash_attn,
            mmap,
            mlock,
            threads_batch,
            _rope(rope_scaling, rope_scale, rope_freq_base, rope_freq_scale, yarn_orig_ctx),
        ),
        draft_cache=CacheTypes(
            cast(CacheType, cache_type_k_draft or cache_type_k),
            cast(CacheType, cache_type_v_draft or cache_type_v),
        )
        if cache_type_k_draft or cache_type_v_draft
        else None,
    )


def _tuning(
    cache: CacheTypes,
    flash_attn: str,
    mmap: bool,
    mlock: bool,
    threads_batch: int | None,
    rope: Rope,
) -> Tuning:
    """The memory and speed knobs; --threads-batch capped at the CPUs as --threads is."""
    from specrun.system.cpus import choose_threads

    if threads_batch is not None:
        threads_batch, capped = choose_threads(threads_batch)
        if capped:
            note(in_flag_terms(capped).replace("--threads", "--threads-batch"))
    return Tuning(
        cache=cache,
        flash_attn=cast(FlashAttention, flash_attn),
        mmap=mmap,
        mlock=mlock,
        threads_batch=threads_batch,
        rope=rope,
    )


def _rope(
    scaling: str | None,
    scale: float | None,
    freq_base: float | None,
    freq_scale: float | None,
    yarn_orig_ctx: int | None,
) -> Rope:
    """llama.cpp's RoPE flags: --rope-scale N is --rope-freq-scale 1/N."""
    if scale is not None and freq_scale is not None:
        raise OptionError("--rope-scale N is --rope-freq-scale 1/N: give one of them")
    if scale is not None and not scale >= 1:
        raise OptionError(f"--rope-scale must be at least 1, got {scale}")
    return Rope(
        scaling=cast(RopeScalingType | None, scaling),
        freq_base=freq_base,
        freq_scale=1 / scale if scale is not None else freq_scale,
        yarn_orig_ctx=yarn_orig_ctx,
    )


LOOKUP_DEFAULTS = LookupOptions()
LOOKUP_OPTIONS = {
    "lookup_ngram": (
        int,
        typer.Option(
            LOOKUP_DEFAULTS.ngram,
            "--lookup-ngram",
            min=1,
            max=8,
            help="Longest n-gram prompt lookup matches.",
        ),
    ),
    "lookup_min": (
        int,
        typer.Option(
            LOOKUP_DEFAULTS.min_ngram,
            "--lookup-min",
            min=1,
            max=8,
            help="Shortest n-gram prompt lookup matches.",
        ),
    ),
    "lookup_max": (
        int,
        typer.Option(
            LOOKUP_DEFAULTS.max_tokens,
            "--lookup-max",
            min=1,
            max=64,
            help="Most tokens prompt lookup proposes.",
        ),
    ),
}
P_MIN = typer.Option(
    DraftOptions.p_min,
    "--p-min",
    "--draft-p-min",
    metavar="P",
    rich_help_panel=DRAFTING_PANEL,
    min=0.0,
    max=1.0,
    help="Stop drafting when the draft's confidence falls below this.",
)

LOOKUP_GROUP = OptionGroup("lookup", LOOKUP_OPTIONS, _lookup, DRAFTING_PANEL)
DRAFTING = OptionGroup(
    "drafting",
    {
        "gamma": (
            str,
            typer.Option(
                DraftOptions.gamma,
                "--gamma",
                "-g",
                metavar="auto|heuristic|N",
                help="Draft length: auto, heuristic or a number (0 = no speculation).",
            ),
        ),
        "gamma_max": (
            int | None,
            typer.Option(
                DraftOptions.gamma_max,
                "--gamma-max",
                "--draft-max",
                min=0,
                max=32,
                show_default=False,
                help="Upper bound of γ for auto/heuristic [default: 8, or a block draft's "
                "block where longer]; --draft-max is llama.cpp's name.",
            ),
        ),
        "p_min": (float, P_MIN),
        "lookup": (
            bool,
            typer.Option(
                False,
                "--lookup",
                help="Prompt lookup first, the draft model when the text offers no match.",
            ),
        ),
        **LOOKUP_OPTIONS,
        "suffix_store": (
            Path | None,
            typer.Option(
                None,
                "--suffix-store",
                metavar="FILE",
                help="Keep suffix drafts' earlier answers in FILE between runs (-d suffix); "
                "it holds their tokens: keep it private.",
            ),
        ),
    },
    _drafting,
    DRAFTING_PANEL,
)
SAMPLING = OptionGroup(
    "sampling",
    {
        "temp": (
            float,
            typer.Option(
                SamplingParams.temperature, "--temp", min=0.0, help="Temperature; 0 is greedy."
            ),
        ),
        "top_k": (
            int,
            typer.Option(SamplingParams.top_k, "--top-k", min=0, help="Top-k (0 = off)."),
        ),
        # Ranges of top-p and min-p are open at one end, which Typer cannot say: SamplingParams
        # checks them.
        "top_p": (
            float,
            typer.Option(SamplingParams.top_p, "--top-p", help="Top-p, 0 < p <= 1 (1 = off)."),
        ),
        "min_p": (
            float,
            typer.Option(SamplingParams.min_p, "--min-p", help="Min-p, 0 <= p < 1 (0 = off)."),
        ),
        "seed": (
            int | None,
            typer.Option(None, "--seed", min=0, help="Seed for a reproducible sampled run."),
        ),
        "repeat_penalty": (
            float,
            typer.Option(
                SamplingParams.repeat_penalty,
                "--repeat-penalty",
                help="Penalize tokens repeated in the last --repeat-last-n (1 = off).",
            ),
        ),
        "presence_penalty": (
            float,
            typer.Option(
                SamplingParams.presence_penalty,
                "--presence-penalty",
                help="Less this for a token present there, -2 to 2 (0 = off).",
            ),
        ),
        "frequency_penalty": (
            float,
            typer.Option(
                SamplingParams.frequency_penalty,
                "--frequency-penalty",
                help="Less this per time a token occurs there, -2 to 2 (0 = off).",
            ),
        ),
        "repeat_last_n": (
            int,
            typer.Option(
                SamplingParams.penalty_last_n,
                "--repeat-last-n",
                min=0,
                help="Tokens of the text the penalties look back on (0 = off).",
            ),
        ),
        "logit_bias": (
            list[str],
            typer.Option(
                [],
                "--logit-bias",
                metavar="ID+BIAS",
                help="Add BIAS to a token's logit, e.g. 15043+1 or 15043-1.5 (repeatable).",
            ),
        ),
    },
    _sampling,
    SAMPLING_PANEL,
)
# llama.cpp's memory and speed flags, as its common/arg.cpp names them.
CACHE_TYPE_CHOICES = "|".join(CACHE_TYPES)
TUNING_OPTIONS = {
    "cache_type_k": (
        str,
        typer.Option(
            "f16",
            "--cache-type-k",
            "-ctk",
            metavar=CACHE_TYPE_CHOICES,
            help="KV cache type for K; q8_0 halves the cache's memory (changes the "
            "model's numbers: its text may differ from f16's).",
        ),
    ),
    "cache_type_v": (
        str,
        typer.Option(
            "f16",
            "--cache-type-v",
            "-ctv",
            metavar=CACHE_TYPE_CHOICES,
            help="KV cache type for V; a quantized one needs flash attention.",
        ),
    ),
    "cache_type_k_draft": (
        str | None,
        typer.Option(
            None,
            "--cache-type-k-draft",
            "-ctkd",
            metavar=CACHE_TYPE_CHOICES,
            show_default=False,
            help="The draft model's KV cache type for K (default: the target's).",
        ),
    ),
    "cache_type_v_draft": (
        str | None,
        typer.Option(
            None,
            "--cache-type-v-draft",
            "-ctvd",
            metavar=CACHE_TYPE_CHOICES,
            show_default=False,
            help="The draft model's KV cache type for V (default: the target's).",
        ),
    ),
    "flash_attn": (
        str,
        typer.Option(
            "auto",
            "--flash-attn",
            "-fa",
            metavar="on|off|auto",
            help="Flash attention (auto: where the device supports it).",
        ),
    ),
    "mmap": (
        bool,
        typer.Option(
            True,
            "--mmap/--no-mmap",
            help="Map the model file (--no-mmap reads it into memory: slower to load, "
            "no page-outs).",
        ),
    ),
    "mlock": (
        bool,
        typer.Option(False, "--mlock", help="Keep the weights in RAM: never swapped or paged out."),
    ),
    "threads_batch": (
        int | None,
        typer.Option(
            None,
            "--threads-batch",
            "-tb",
            min=1,
            show_default=False,
            help="CPU threads for prompts and verify batches (default: --threads).",
        ),
    ),
    "rope_scaling": (
        str | None,
        typer.Option(
            None,
            "--rope-scaling",
            metavar="none|linear|yarn",
            show_default=False,
            help="RoPE scaling method (default: the model's, else linear).",
        ),
    ),
    "rope_scale": (
        float | None,
        typer.Option(
            None,
            "--rope-scale",
            metavar="N",
            show_default=False,
            help="Stretch the context N times: with --ctx past the trained context, "
            "e.g. --rope-scaling yarn --rope-scale 4.",
        ),
    ),
    "rope_freq_base": (
        float | None,
        typer.Option(
            None,
            "--rope-freq-base",
            metavar="N",
            show_default=False,
            help="RoPE base frequency, NTK-aware scaling (default: the model's).",
        ),
    ),
    "rope_freq_scale": (
        float | None,
        typer.Option(
            None,
            "--rope-freq-scale",
            metavar="N",
            show_default=False,
            help="RoPE frequency scale: the context stretched 1/N times (default: the model's).",
        ),
    ),
    "yarn_orig_ctx": (
        int | None,
        typer.Option(
            None,
            "--yarn-orig-ctx",
            metavar="N",
            min=1,
            show_default=False,
            help="YaRN: the model's original context (default: its trained context).",
        ),
    ),
}
LOAD = OptionGroup(
    "load",
    {
        "ctx": (
            int | None,
            typer.Option(
                None,
                "--ctx",
                "-c",
                "--ctx-size",
                min=16,
                rich_help_panel=MODEL_PANEL,
                show_default=False,
                help=f"Context size in tokens (default: {DEFAULT_CTX}, or the model's "
                "trained context if smaller).",
            ),
        ),
        "gpu_layers": (
            int | None,
            typer.Option(
                None,
                "--gpu-layers",
                "-ngl",
                "--n-gpu-layers",
                help="Target layers on the GPU (default: as many as fit).",
            ),
        ),
        "draft_gpu_layers": (
            int | None,
            typer.Option(
                None,
                "--draft-gpu-layers",
                "-ngld",
                "--n-gpu-layers-draft",
                help="Draft layers on the GPU (default: all of them).",
            ),
        ),
        "fit": (
            str,
            typer.Option(
                "on",
                "--fit",
                metavar="on|off",
                help="on: place layers by free GPU memory, the draft first; "
                "off: every layer on the GPU.",
            ),
        ),
        "threads": (
            int | None,
            typer.Option(
                None,
                "--threads",
                min=1,
                help="CPU threads per model (default: one per physical core).",
            ),
        ),
        "verbose": (
            bool,
            typer.Option(
                False,
                "--verbose",
                "-v",
                rich_help_panel=OUTPUT_PANEL,
                help="Show llama.cpp's log.",
            ),
        ),
        "reproducible": (
            bool,
            typer.Option(
                False,
                "--reproducible",
                rich_help_panel=SAMPLING_PANEL,
                help="Greedy output the same at any γ and in every run, as plain "
                "decoding gives it (checked at load; may cost speed).",
            ),
        ),
        "rpc": (
            str | None,
            typer.Option(
                None,
                "--rpc",
                metavar="HOST:PORT[,HOST:PORT...]",
                help="Also place target layers on these machines' devices "
                "(`specrun rpc-server` there); the draft stays here.",
            ),
        ),
        "backend_sampling": (
            str,
            typer.Option(
                "auto",
                "--backend-sampling",
                metavar="auto|on|off",
                help="Choose each row's top-k candidates on the output layer's device, so "
                "only they reach the loop (auto: where it is a GPU but a Vulkan one; on, "
                "off).",
            ),
        ),
        "tree": (
            int,
            typer.Option(
                1,
                "--tree",
                min=1,
                rich_help_panel=DRAFTING_PANEL,
                max=8,
                help="Lookup and suffix drafts as token trees of up to this many branches, "
                "verified in one pass (1: chains).",
            ),
        ),
        **TUNING_OPTIONS,
    },
    _load,
    PERFORMANCE_PANEL,
)


def _models_group(*, model_flags: bool) -> OptionGroup:
    """--target, --draft and --catalog; with `model_flags`, llama.cpp's -m/--model for --target
    too (serve's --model adds a served model, and takes -m there: `serve.POOL`)."""
    return OptionGroup(
        "models",
        {
            "target": (
                str | None,
                typer.Option(
                    None,
                    "--target",
                    "-t",
                    *(("--model", "-m") if model_flags else ()),
                    metavar="MODEL",
                    help="Target model: alias, GGUF path, REPO:QUANT or REPO/FILE.gguf. "
                    "Default: the demo pair."
                    + (" -m/--model are llama.cpp's names." if model_flags else ""),
                ),
            ),
            "draft": (
                str | None,
                typer.Option(
                    None,
                    "--draft",
                    "-d",
                    "--model-draft",
                    "-md",
                    metavar="DRAFT[,DRAFT...]",
                    help="Draft model (alias, path, ...), `auto` for the catalog's pick "
                    "(downloaded if need be), `lookup` for prompt lookup, `suffix` for suffix "
                    "drafts (the request's text and this process's earlier answers), "
                    "`eagle3:HEAD` for an EAGLE-3 head (alias or path; `eagle3` alone: the "
                    "catalog's head for the target), `mtp` for the target's own MTP layers, "
                    "`dflash:FILE` or `dspark:FILE` for a block draft (DFlash or DSpark: the file "
                    "says which), or `none` for plain decoding. Several, separated by commas, "
                    "make the hybrid. Default: the target's catalog draft or head where one is "
                    "on disk, with prompt lookup; else prompt lookup (never a download).",
                ),
            ),
            "catalog": (
                Path | None,
                typer.Option(
                    None,
                    "--catalog",
                    metavar="FILE",
                    help="An extra models.toml that adds or overrides aliases.",
                ),
            ),
        },
        ModelRequest,
        MODEL_PANEL,
    )


MODELS = _models_group(model_flags=True)
SERVED_MODELS = _models_group(model_flags=False)  # serve's: its --model adds a model
SYSTEM = typer.Option(
    None,
    "--system",
    "-s",
    metavar="TEXT",
    rich_help_panel=OUTPUT_PANEL,
    help="System prompt (llama.cpp's -s is --seed: a whole number here is refused).",
)
MAX_TOKENS = typer.Option(
    256,
    "--max-tokens",
    "-n",
    "--n-predict",
    min=1,
    rich_help_panel=OUTPUT_PANEL,
    help="Most tokens to generate per answer.",
)


# --- loading ---------------------------------------------------------------------------------


def load_engine(
    models: ModelChoice,
    load: LoadOptions,
    *,
    params: SamplingParams = SamplingParams(),
    drafting: DraftOptions = DraftOptions(),
    announce: Callable[[str], None] = note,
) -> Engine:
    """The one loader of run, chat and bench; `announce` hears where the layers went and, once
    they are loaded, which draft stands for no --draft."""
    from specrun.engine import Engine

    engine = Engine.load(
        models.target,
        models.draft,
        options=load,
        params=params,
        drafting=drafting,
        announce=announce,
    )
    if models.default_note:
        announce(models.default_note)
    return engine


def load_notes(model: Model, requested: LoadOptions) -> None:
    """Once the models are loaded: say when the context is not the --ctx asked for, and what
    --reproducible does."""
    asked = requested.n_ctx
    if asked is not None and model.n_ctx < asked and model.n_ctx_reach != model.n_ctx_train:
        note(
            f"--ctx {asked} is more than {model.name} reaches with its RoPE scaling "
            f"({model.n_ctx_reach}); using {model.n_ctx}"
        )
    elif asked is not None and model.n_ctx < asked:
        note(
            f"--ctx {asked} is more than {model.name} was trained for ({model.n_ctx_train}); "
            f"using {model.n_ctx}"
        )
    elif asked is not None and model.n_ctx > asked:
        note(
            f"--ctx {asked}: llama.cpp allocates the context in steps of 256 tokens; "
            f"using {model.n_ctx}"
        )
    if model.invariance is not None:
        note(f"--reproducible: {model.invariance.describe()}")


def busy_note(contention: Contention | None, requested: LoadOptions) -> None:
    """After a generation (and its figures): say when other programs took the CPUs its threads
    needed. Not where --threads chose them: that is the user's call."""
    warning = contention.warning() if contention is not None else None
    if warning and requested.threads is None:
        note(warning)


def placement_row(where: Placement) -> tuple[str, str]:
    """The `--stats` row that says where the models ran (and, placed by fit, the memory it took)."""
    text = where.text()
    if where.plan is not None:
        measured = (
            "not reported by the device"
            if where.gpu_bytes_measured is None
            else f"{where.gpu_bytes_measured / 1e9:.1f} GB"
        )
        text += f", GPU memory {measured} (estimated {where.plan.gpu_bytes / 1e9:.1f} GB)"
    return "device", text


def system_prompt(text: str | None) -> str | None:
    """--system's text. A whole number is refused: it is llama.cpp's `-s SEED`, which would
    otherwise become a system prompt without a word."""
    text = argument_text(text, "--system")
    if text is not None and whole_number(text.strip()) is not None:
        raise OptionError(
            f"-s/--system takes a system prompt, not the number {text.strip()}: llama.cpp's "
            f"-s (a seed) is --seed here (--seed {text.strip()})"
        )
    return text


def read_prompt(argument: str | None) -> str:
    """stdin first (when it is not a terminal), then the argument."""
    parts = []
    piped = read_stdin()
    if piped and piped.strip():
        parts.append(piped.rstrip("\n"))
    if argument:
        parts.append(argument_text(argument, "the prompt argument"))
    if not parts:
        raise OptionError("no prompt: give one as an argument or on stdin")
    return "\n\n".join(parts)
