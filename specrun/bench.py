"""`specrun bench`: every drafting mode and γ policy on the same prompts, measured in one run.

The prompts are single requests (the built-in set or a JSONL file), or with `--agentic`,
episodes: requests an agent sends one after another (extraction with one schema over many
records, a function edited over several turns, a tool loop, a template filled anew), where the
suffix drafts of a mode learn from its earlier answers in the same repetition.

Per prompt class and mode it reports the median tokens/s over repetitions, the speedup
against plain decoding and what --stats estimated it to be, acceptance, mean accepted length and
mean γ; it measures the cost curve (draft time per token, target time per verify width) and the γ
the cost model predicts; and at temperature 0 it checks that every mode produced the same text.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Literal, TypedDict

from specrun.core.costs import expected_rate
from specrun.core.drafting import DraftSource, HybridDraft, policy_for
from specrun.core.exactness import first_divergence
from specrun.core.gamma import GAMMA_MAX
from specrun.core.lookup import LookupDraft
from specrun.core.loop import Round, generate
from specrun.core.sampling import NEAR_TIE, SamplingParams, candidate_width
from specrun.core.stats import Stats, StatsRecord
from specrun.core.suffix import SuffixDraft, SuffixStore, remembering
from specrun.errors import OptionError, SpecrunError
from specrun.llama.model import Model
from specrun.llama.placement import Placement
from specrun.options import LookupOptions
from specrun.prompt import Message, prompt_tokens, render
from specrun.system.busy import Contention, Watch
from specrun.system.formatting import format_or_dash
from specrun.system.textio import read_text

# A prompt of the set: its class (a group of the table's rows) and its text.
BenchPrompt = TypedDict("BenchPrompt", {"class": str, "prompt": str})
# A row of the table: a mode on a class of prompts (or "all"), medians over the repetitions.
TableRow = TypedDict(
    "TableRow",
    {
        "class": str,
        "mode": str,
        "draft": str,  # which draft the mode ran: its kind (`draft_label`)
        "tokens_per_second": float,
        "speedup": float | None,  # against plain in the same repetition; None without plain
        "estimated_speedup": float | None,  # what --stats estimated in the same runs
        "acceptance_rate": float | None,  # None where nothing was drafted
        "mean_accepted_length": float,
        "mean_gamma": float,
    },
)

BUILTIN_PROMPTS: list[BenchPrompt] = [
    {
        "class": "code",
        "prompt": (
            "Write a Python function that checks whether a number is prime. Include a docstring."
        ),
    },
    {
        "class": "code",
        "prompt": "Write a JavaScript function that returns the unique values of an array.",
    },
    {
        "class": "prose",
        "prompt": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    },
    {"class": "prose", "prompt": "Describe a walk through a forest in autumn."},
    {"class": "chat", "prompt": "What are three tips for staying focused while working from home?"},
    {"class": "chat", "prompt": "What is the difference between weather and climate?"},
    {
        "class": "extraction",
        "prompt": (
            "Copy this JSON and change the city to Berlin:\n"
            '{"id": 1042, "name": "Bob Smith", "city": "London", '
            '"email": "bob.smith@example.org", "active": true, "roles": ["admin", "editor"]}'
        ),
    },
    {
        "class": "extraction",
        "prompt": (
            "Copy this CSV and add a row for Dave, 41, Rome:\n"
            "name,age,city\nAlice,30,Paris\nBob,25,London\nCarol,35,Berlin"
        ),
    },
]


# The built-in agentic episodes (`--agentic`; bench/agentic.py sends them to servers).
EPISODES = Path(__file__).parent / "data" / "agentic.jsonl"


@dataclass(frozen=True)
class Episode:
    """Requests an agent sends one after another, each with the system message: with
    `history`, each carries the earlier turns and the answers they got (a conversation), else
    each is sent alone (the same task over new inputs)."""

    name: str
    kind: str  # extraction, edit, tools, template: what the agent does (a class of the table)
    history: bool
    system: str
    turns: tuple[str, ...]


def load_episodes(path: Path | None = None) -> list[Episode]:
    """The episodes of a JSON-lines file (the built-in set where None); a line that is not one
    is a one-line error."""
    path = path or EPISODES
    episodes = []
    for number, line in enumerate(read_text(path, "episodes").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            episode = Episode(
                str(record["name"]),
                str(record["kind"]),
                bool(record["history"]),
                str(record["system"]),
                tuple(str(turn) for turn in record["turns"]),
            )
        except (ValueError, KeyError, TypeError) as error:
            problem = f"{type(error).__name__}: {error}"
            raise SpecrunError(f"{path}:{number}: not an episode ({problem})") from None
        if not episode.turns:
            raise SpecrunError(f"{path}:{number}: episode {episode.name!r} has no turns")
        episodes.append(episode)
    if not episodes:
        raise SpecrunError(f"{path} holds no episodes")
    return episodes


# Where a mode's drafts come from: nowhere (plain), the draft (a draft model or a head),
# prompt lookup, suffix drafts (the text and the mode's earlier answers), either as token
# trees, or lookup then the draft.
ModeDraft = Literal["none", "draft", "lookup", "suffix", "lookup-tree", "suffix-tree", "hybrid"]


@dataclass(frozen=True)
class Mode:
    """One column of the comparison: a draft source and a γ policy."""

    name: str
    draft: ModeDraft
    gamma: str  # as parse_policy reads it


def default_modes(
    gammas: Sequence[int], has_draft: bool, lookup: bool, trees: bool = False
) -> list[Mode]:
    """`trees`: the target verifies token trees, so lookup's and suffix drafts are also
    compared as trees, at the same verify width (γ nodes) as their chains."""
    modes = [Mode("plain", "none", "0")]
    if has_draft:
        modes += [Mode(f"γ={g}", "draft", str(g)) for g in gammas]
        modes += [Mode("heuristic", "draft", "heuristic"), Mode("auto", "draft", "auto")]
    if lookup:
        modes += [Mode("lookup", "lookup", "auto"), Mode("suffix", "suffix", "auto")]
        if trees:
            modes += [Mode("lookup tree", "lookup-tree", "auto")]
            modes += [Mode("suffix tree", "suffix-tree", "auto")]
        if has_draft:
            modes.append(Mode("hybrid", "hybrid", "auto"))
    return modes


def load_prompts(path: Path | None) -> list[BenchPrompt]:
    """The built-in set, or a JSONL file of {"prompt": ..., "class": ...} lines."""
    if path is None:
        return BUILTIN_PROMPTS
    prompts: list[BenchPrompt] = []
    lines = read_text(path, "prompts").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            prompts.append(
                {"class": str(record.get("class", "prompts")), "prompt": str(record["prompt"])}
            )
        except (json.JSONDecodeError, KeyError, AttributeError):
            raise SpecrunError(f'{path}:{number}: expected a JSON object with a "prompt"') from None
    if not prompts:
        raise SpecrunError(f"{path} holds no prompts")
    return prompts


@dataclass
class CostCurve:
    draft_per_token: float | None  # seconds
    verify_by_width: dict[int, float]  # width -> seconds
    # Loop overhead per round, seconds, from the plain runs; None where none of them decoded
    # (one token each: the prompt's pass chose it).
    overhead: float | None

    def predicted_best(self, alpha: float, gamma_max: int) -> tuple[int, dict[int, float]]:
        overhead = self.overhead or 0.0
        rates = {0: expected_rate(alpha, 0, 0.0, self.verify_by_width[1], overhead)}
        if self.draft_per_token is not None:
            for g in range(1, gamma_max + 1):
                rates[g] = expected_rate(
                    alpha, g, self.draft_per_token, self.verify_by_width[g + 1], overhead
                )
        return max(rates, key=rates.__getitem__), rates


def measure_verify(
    target: Model, context: list[int], max_width: int, repeats: int = 5, top: int | None = None
) -> dict[int, float]:
    """Median time of one target call evaluating k new positions, k = 1..max_width; each
    call first rolls back to the same context. `top`: the candidates a row brings where the
    target samples on its device, as the loop asks for them (`candidate_width`)."""

    def timed(width: int) -> float:
        samples = []
        for _ in range(repeats):
            target.logits(context, 0)
            extension = (
                context + context[-width:]
                if width <= len(context)
                else context + [context[-1]] * width
            )
            start = time.perf_counter()
            target.logits(extension, width, view=True, top=top)  # as the round loop reads them
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    return {width: timed(width) for width in range(1, max_width + 1)}


@dataclass
class Run:
    mode: str
    prompt_class: str
    prompt_index: int
    repetition: int
    stats: StatsRecord
    tokens: list[int] = field(repr=False)


@dataclass
class BenchResult:
    target: str
    draft: str | None
    params: dict[str, object]
    modes: list[str]
    classes: list[str]
    runs: list[Run]
    table: list[TableRow]
    costs: CostCurve
    alpha: float | None
    predicted_gamma: int | None
    predicted_rates: dict[int, float]
    identical: bool | None  # None when sampling (outputs legitimately differ)
    mismatches: list[str]
    placement: Placement
    contention: Contention | None  # other programs' CPU use while it ran; None: not measured

    def to_json(self) -> str:
        record = asdict(self)
        record["placement"] = self.placement.as_dict()
        for run in record["runs"]:
            del run["tokens"]
        return json.dumps(record, indent=2)


def _draft_source(
    mode: Mode, draft: DraftSource | None, lookup: LookupOptions, leaves: int = 1
) -> DraftSource | None:
    """A mode's source; suffix drafts with a store of their own (what they learn stays in the
    mode), trees of `leaves` branches."""
    if mode.draft == "none":
        return None
    if mode.draft in ("lookup", "lookup-tree"):
        tree = leaves if mode.draft == "lookup-tree" else 1
        return LookupDraft(lookup.ngram, lookup.min_ngram, lookup.max_tokens, tree)
    if mode.draft in ("suffix", "suffix-tree"):
        return SuffixDraft(SuffixStore(), leaves if mode.draft == "suffix-tree" else 1)
    if draft is None:  # default_modes offers the draft's modes only with a draft
        raise SpecrunError(f"bench: mode {mode.name} needs a draft model or head")
    return draft if mode.draft == "draft" else HybridDraft(lookup.draft(), [draft])


def draft_label(source: DraftSource | None) -> str:
    """Which draft a mode runs, by the kind `--stats` names: - (none), lookup, model, eagle3,
    mtp, dflash, dspark, or the hybrid's sources in the order it tries them (lookup+model)."""
    if source is None:
        return "-"
    if isinstance(source, HybridDraft):
        return "+".join(d.kind for d in (source.lookup, *source.drafts) if d is not None)
    return source.kind


def run_bench(
    target: Model,
    draft: DraftSource | None,
    prompts: list[BenchPrompt],
    modes: list[Mode],
    *,
    params: SamplingParams,
    max_tokens: int = 128,
    repeat: int = 3,
    gamma_max: int = GAMMA_MAX,
    lookup: LookupOptions = LookupOptions(),
    placement: Placement | None = None,
    progress: Callable[[str], None] = lambda line: None,
    episodes: list[Episode] | None = None,
) -> BenchResult:
    """Every mode on every prompt, interleaved; `draft` is the draft model's, the head's or the
    block draft's source (its p_min is the bench's) and `placement` where the models run.
    With `episodes`, their requests instead of `prompts`: each mode runs an episode's requests
    in order (a conversation's with its own earlier answers), its suffix drafts learning from
    its answers within a repetition, and starting over at the next."""
    watch = Watch()  # all of it is timed, the warm-up and the cost curve included
    if episodes:
        classes = list(dict.fromkeys(episode.kind for episode in episodes))
        first_prompt = _request(target, episodes[0], [])
    else:
        encoded = [prompt_tokens(target, p["prompt"]) for p in prompts]
        classes = list(dict.fromkeys(p["class"] for p in prompts))
        first_prompt = encoded[0]
    leaves = target.tree_branches

    # One policy per mode for the whole bench, as an engine keeps its policy across turns:
    # auto pays its warm-up once (in the warm-up runs below), not in every generation.
    # Each mode's source lives as long too (the hybrid's auto is its policy and its source),
    # but suffix drafts', whose store starts over each repetition of episodes.
    sources = {mode.name: _draft_source(mode, draft, lookup, leaves) for mode in modes}
    policies = {
        name: policy_for(sources[name], mode.gamma, gamma_max) for name, mode in zip(sources, modes)
    }

    # The draft's time per drafted token, as the rounds of the fixed-γ modes measured it
    # (a draft model's decode or a head's, with its sampling): seconds, tokens.
    drafting = [0.0, 0]

    def one_run(mode: Mode, tokens: list[int]) -> tuple[Stats, list[int]]:
        stats = Stats()
        output: list[int] = []
        source = sources[mode.name]
        events = generate(
            target,
            tokens,
            draft=source,
            params=params,
            policy=policies[mode.name],
            max_tokens=max_tokens,
        )
        for event in remembering(events, source, None):  # a suffix store learns the answer
            stats.add(event)
            output.extend(getattr(event, "tokens", ()))
            if mode.draft == "draft" and mode.gamma.isdigit() and isinstance(event, Round):
                drafting[0] += event.draft_seconds
                drafting[1] += event.drafted
        return stats, output

    # Warm-up: first calls pay for allocations and page faults.
    for mode in modes:
        one_run(mode, first_prompt)

    runs: list[Run] = []
    asked: dict[tuple[str, int, int], list[int]] = {}  # (mode, prompt, repetition): its tokens

    def record(
        mode: Mode, prompt_class: str, index: int, repetition: int, tokens: list[int]
    ) -> str:
        """One request of a mode: run, kept, and its answer's text."""
        stats, output = one_run(mode, tokens)
        asked[(mode.name, index, repetition)] = tokens
        runs.append(Run(mode.name, prompt_class, index, repetition, stats.as_dict(), output))
        return b"".join(map(target.piece, output)).decode("utf-8", errors="replace")

    # Interleaved, so drift in machine speed hits every mode alike, and in turn: a run's
    # place after another prompt's or mode's run changes its speed, so each mode takes each
    # place as often.
    for repetition in range(repeat):
        if episodes:
            for mode in modes:  # what a suffix store learned in the last repetition is gone
                if mode.draft in ("suffix", "suffix-tree"):
                    sources[mode.name] = _draft_source(mode, draft, lookup, leaves)
            first = 0
            for index, episode in enumerate(episodes):
                turn = (repetition * len(episodes) + index) % len(modes)
                for mode in modes[turn:] + modes[:turn]:
                    answers: list[str] = []
                    for k, _ in enumerate(episode.turns):
                        tokens = _request(target, episode, answers)
                        answers.append(record(mode, episode.kind, first + k, repetition, tokens))
                first += len(episode.turns)
                progress(f"repetition {repetition + 1}/{repeat}, episode {episode.name}")
            continue
        for index, (prompt, tokens) in enumerate(zip(prompts, encoded)):
            turn = (repetition * len(prompts) + index) % len(modes)
            for mode in modes[turn:] + modes[:turn]:
                record(mode, prompt["class"], index, repetition, tokens)
            progress(f"repetition {repetition + 1}/{repeat}, prompt {index + 1}/{len(prompts)}")

    table = _table(runs, modes, classes, {name: draft_label(s) for name, s in sources.items()})
    mismatches = _mismatches(target, asked, runs) if params.greedy else []
    verify = measure_verify(
        target, first_prompt, gamma_max + 1, top=candidate_width(params, target.n_vocab)
    )
    draft_per_token = drafting[0] / drafting[1] if drafting[1] else None
    overheads = [
        overhead
        for r in runs
        if r.mode == "plain" and (overhead := r.stats["overhead_seconds_per_round"]) is not None
    ]
    costs = CostCurve(draft_per_token, verify, statistics.median(overheads) if overheads else None)
    alpha = _alpha(runs)
    predicted, rates = costs.predicted_best(alpha, gamma_max) if alpha is not None else (None, {})
    return BenchResult(
        target=target.name,
        draft=draft.name if draft else None,
        params=asdict(params),
        modes=[m.name for m in modes],
        classes=classes,
        runs=runs,
        table=table,
        costs=costs,
        alpha=alpha,
        predicted_gamma=predicted,
        predicted_rates=rates,
        identical=(not mismatches) if params.greedy else None,
        mismatches=mismatches,
        placement=placement or Placement.of([target]),
        contention=watch.stop(target.threads),
    )


def _rate(runs: list[Run]) -> float:
    """Tokens per second of a group of runs: all their tokens over all their decode time."""
    return sum(r.stats["generated_tokens"] for r in runs) / sum(
        r.stats["decode_seconds"] for r in runs
    )


def _estimate(runs: list[Run]) -> float | None:
    """What --stats estimated for a group of runs, aggregated as `_rate` aggregates the
    measured rate (all tokens over all time): each run's estimate weighted by its decode time."""
    estimated = [
        (speedup, r.stats["decode_seconds"])
        for r in runs
        if (speedup := r.stats["estimated_speedup"]) is not None
    ]
    weight = sum(seconds for _, seconds in estimated)
    return sum(speedup * seconds for speedup, seconds in estimated) / weight if weight else None


def _table(
    runs: list[Run], modes: list[Mode], classes: list[str], drafts: dict[str, str]
) -> list[TableRow]:
    rows: list[TableRow] = []
    for prompt_class in [*classes, "all"]:
        selected = [r for r in runs if prompt_class in ("all", r.prompt_class)]
        repetitions = sorted({r.repetition for r in selected})
        plain_runs = [r for r in selected if r.mode == "plain"]
        plain = (
            {k: _rate([r for r in plain_runs if r.repetition == k]) for k in repetitions}
            if plain_runs
            else {}
        )
        for mode in modes:
            mine = [r for r in selected if r.mode == mode.name]
            # Per repetition, the class's prompts taken together; then the median over
            # repetitions, of the rate and of the ratio to plain in the same repetition
            # (runs close in time, so the machine's drift cancels).
            by_repetition = {k: [r for r in mine if r.repetition == k] for k in repetitions}
            rates = {k: _rate(group) for k, group in by_repetition.items()}
            estimates = [
                e for group in by_repetition.values() if (e := _estimate(group)) is not None
            ]
            drafted = sum(r.stats["drafted"] for r in mine)
            rows.append(
                {
                    "class": prompt_class,
                    "mode": mode.name,
                    "draft": drafts[mode.name],
                    "tokens_per_second": statistics.median(rates.values()),
                    "speedup": statistics.median(rates[k] / plain[k] for k in repetitions)
                    if plain
                    else None,
                    # What --stats says of the same runs: checked here against the measured ratio.
                    "estimated_speedup": statistics.median(estimates) if estimates else None,
                    "acceptance_rate": sum(r.stats["accepted"] for r in mine) / drafted
                    if drafted
                    else None,
                    "mean_accepted_length": sum(r.stats["generated_tokens"] for r in mine)
                    / sum(r.stats["rounds"] for r in mine),
                    "mean_gamma": statistics.fmean(r.stats["mean_gamma"] or 0.0 for r in mine),
                }
            )
    return rows


def _request(target: Model, episode: Episode, answers: list[str]) -> list[int]:
    """The tokens of an episode's next request (its `len(answers)`-th): alone, or with the
    earlier turns and their `answers`."""
    turn = len(answers)
    messages = [Message("system", episode.system)]
    if episode.history:
        for asked, answer in zip(episode.turns, answers):
            messages += [Message("user", asked), Message("assistant", answer)]
    return render(target, [*messages, Message("user", episode.turns[turn])])


def _mismatches(
    target: Model, asked: dict[tuple[str, int, int], list[int]], runs: list[Run]
) -> list[str]:
    """At temperature 0 every mode must produce plain decoding's tokens (for a conversation's
    request, where its earlier answers were plain decoding's); say where one does not, and
    whether the target's top two logits there are a near tie."""
    reference = {(r.prompt_index, r.repetition): r.tokens for r in runs if r.mode == "plain"}
    found = []
    for run in runs:
        key = (run.prompt_index, run.repetition)
        prompt = asked[(run.mode, run.prompt_index, run.repetition)]
        if prompt != asked[("plain", run.prompt_index, run.repetition)]:  # reported earlier
            continue
        divergence = first_divergence(target, prompt, reference[key], run.tokens)
        if divergence is not None:
            tie = "near tie" if divergence.is_near_tie(NEAR_TIE) else "NOT a near tie"
            found.append(
                f"{run.mode} on prompt {run.prompt_index + 1} (repetition {run.repetition + 1}) "
                f"at {divergence.describe()}: {tie}"
            )
    return found


def _alpha(runs: list[Run]) -> float | None:
    """Per-token acceptance of the draft model over the fixed-γ runs."""
    fixed = [r for r in runs if r.mode.startswith("γ=")]
    accepted = sum(r.stats["accepted"] for r in fixed)
    trials = accepted + sum(r.stats["rejections"] for r in fixed)
    return accepted / trials if trials else None


def render_text(result: BenchResult) -> str:
    """The tables `specrun bench` prints."""
    lines = [
        f"target {result.target}, draft {result.draft or '-'}, "
        f"temperature {result.params['temperature']}, modes {', '.join(result.modes)}",
        "",
    ]
    drafts = max(len("draft"), *(len(row["draft"]) for row in result.table))
    header = (
        f"{'class':<12} {'mode':<10} {'draft':<{drafts}} {'tok/s':>7} {'speedup':>8} {'est.':>6} "
        f"{'accept':>7} {'mean len':>9} {'mean γ':>7}"
    )
    lines += [header, "-" * len(header)]
    for row in result.table:
        lines.append(
            f"{row['class']:<12} {row['mode']:<10} {row['draft']:<{drafts}} "
            f"{row['tokens_per_second']:>7.1f} "
            f"{format_or_dash(row['speedup'], '.2f'):>7}x "
            f"{format_or_dash(row['estimated_speedup'], '.2f'):>5}x "
            f"{format_or_dash(row['acceptance_rate'] and row['acceptance_rate'] * 100, '.0f'):>6}% "
            f"{row['mean_accepted_length']:>9.2f} {row['mean_gamma']:>7.2f}"
        )
        if row["class"] != result.table[-1]["class"] and row["mode"] == result.modes[-1]:
            lines.append("")
    costs, busy = result.costs, result.contention
    lines += [
        "",
        (
            "speedup: against plain in the same repetition; "
            "est.: what --stats estimated in the same runs"
        ),
        "",
        "cost curve (medians)",
        # A target partly on the CPU makes wide verifies nearly as cheap as narrow ones.
        f"  placement        {result.placement.text()}",
        # Timings are the machine's as much as the modes': say how quiet it was.
        "  other programs   "
        + (
            f"{busy.others:.1f} of {busy.cpus} CPUs busy on average, beside {busy.threads} threads"
            if busy is not None
            else "- (not measured here)"
        ),
        (
            "  draft per token  "
            f"{format_or_dash(costs.draft_per_token and costs.draft_per_token * 1000, '.2f')} ms"
        ),
        (
            "  loop overhead    "
            f"{format_or_dash(costs.overhead and costs.overhead * 1000, '.2f')} ms per round"
        ),
        "  target verify    "
        + "  ".join(f"{w}:{t * 1000:.1f}" for w, t in costs.verify_by_width.items())
        + "  (width:ms)",
    ]
    if result.predicted_gamma is not None:
        lines.append(
            f"  α = {result.alpha:.2f} (fixed-γ runs): the cost model predicts "
            f"γ = {result.predicted_gamma} "
            f"({result.predicted_rates[result.predicted_gamma]:.1f} tok/s)"
        )
    if result.identical is None:
        lines.append("\noutputs: sampled (temperature > 0), identity not checked")
    elif result.identical:
        lines.append("\noutputs: identical across all modes")
    else:
        lines.append("\noutputs differ from plain decoding:")
        lines += [f"  {m}" for m in result.mismatches]
    return "\n".join(lines)


def auto_verdicts(result: BenchResult) -> list[str]:
    """Per class: auto against the best of plain and every fixed γ, and against plain."""
    verdicts = []
    for prompt_class in [*result.classes, "all"]:
        rows = {
            r["mode"]: r["tokens_per_second"] for r in result.table if r["class"] == prompt_class
        }
        if "auto" not in rows:
            continue
        fixed = {m: v for m, v in rows.items() if m == "plain" or m.startswith("γ=")}
        best = max(fixed, key=fixed.__getitem__)
        verdicts.append(
            f"{prompt_class}: auto {rows['auto']:.1f} tok/s = "
            f"{rows['auto'] / fixed[best]:.0%} of the best "
            f"fixed ({best}, {fixed[best]:.1f}), {rows['auto'] / rows['plain']:.0%} of plain"
        )
    return verdicts


def plot_format(path: Path) -> str:
    """The format `plot` writes `path` in, its extension, checked before the benchmark runs:
    one that matplotlib cannot write would otherwise fail only at the end."""
    from matplotlib.figure import Figure

    _pyplot()
    formats = sorted(Figure().canvas.get_supported_filetypes())
    suffix = path.suffix.lower().removeprefix(".")
    if suffix not in formats:
        problem = (
            f"matplotlib cannot write .{suffix} files" if suffix else "the name has no extension"
        )
        raise OptionError(
            f"--plot {path}: {problem}; name a file ending in one of .{', .'.join(formats)}"
        )
    return suffix


def _pyplot() -> ModuleType:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SpecrunError("--plot needs matplotlib: pip install 'specrun[plot]'") from None
    return plt


def plot(result: BenchResult, path: Path, file_format: str | None = None) -> None:
    """tokens/s against γ per class, with the adaptive and heuristic policies marked, in
    `file_format` (`plot_format`'s), else the format of `path`'s extension."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(8, 5))
    for index, prompt_class in enumerate([*result.classes, "all"]):
        rows = {
            r["mode"]: r["tokens_per_second"] for r in result.table if r["class"] == prompt_class
        }
        points = sorted(
            (0 if m == "plain" else int(m[2:]), v)
            for m, v in rows.items()
            if m == "plain" or m.startswith("γ=")
        )
        color = f"C{index}"
        axes.plot(
            [g for g, _ in points], [v for _, v in points], "o-", color=color, label=prompt_class
        )
        for mode, style in (("auto", "--"), ("heuristic", ":")):
            if mode in rows:
                axes.axhline(rows[mode], color=color, linestyle=style, linewidth=1)
    axes.set_xlabel("γ (0 = plain decoding)")
    axes.set_ylabel("tokens/s (median)")
    axes.set_title(
        f"{result.target} + {result.draft}\ndashed: auto, dotted: heuristic", fontsize=10
    )
    axes.legend()
    figure.tight_layout()
    try:
        figure.savefig(path, format=file_format)
    except (ValueError, RuntimeError) as error:  # a format it cannot draw here (pgf needs LaTeX)
        raise SpecrunError(f"--plot: matplotlib could not draw the plot: {error}") from None
    finally:
        plt.close(figure)
