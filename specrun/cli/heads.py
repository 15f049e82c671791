"""`specrun heads train`: an EAGLE-3 head for a target, trained here with torch.

The progress bars go to stderr; the summary (the file and how to use it) to stdout.
torch is imported only when the command runs: it is the `train` extra.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from tqdm import tqdm

from specrun.cli.options import DEMO_TARGET, note
from specrun.errors import OptionError, SpecrunError
from specrun.models.demo import heads_dir
from specrun.system.numerals import whole_number

if TYPE_CHECKING:
    from specrun.training.fit import Progress

TRAIN_EXTRA = "pip install 'specrun[train]'"

app = typer.Typer(
    help="Make drafts for a target: EAGLE-3 heads trained on it.", no_args_is_help=True
)


def _layers(text: str | None) -> tuple[int, int, int] | None:
    if text is None:
        return None
    layers = [whole_number(part) for part in text.split(",")]
    if len(layers) != 3 or None in layers:
        raise OptionError(f"--layers takes three layer numbers, as 2,15,27: not {text!r}")
    first, middle, last = (layer for layer in layers if layer is not None)
    return first, middle, last


class _Bars:
    """One bar per phase: positions decoded while collecting, then the budget spent."""

    def __init__(self) -> None:
        self.bar: tqdm | None = None
        self.phase = ""

    def __call__(self, progress: Progress) -> None:
        if progress.phase != self.phase:
            self.close()
            self.phase = progress.phase
            if progress.phase == "collect":
                self.bar = tqdm(
                    total=int(progress.total), desc="collect", unit="pos", mininterval=1
                )
            else:
                self.bar = tqdm(total=100, desc="train", unit="%", mininterval=1)
        assert self.bar is not None
        if progress.phase == "collect":
            self.bar.update(int(progress.done) - self.bar.n)
            return
        self.bar.update(int(progress.done * 100) - self.bar.n)
        figures = {
            "step": progress.step,
            "loss": f"{progress.loss:.3f}",
            "pos/s": f"{progress.positions_per_second:.0f}",
        }
        if progress.acceptance:
            figures["held-out acc"] = "/".join(f"{a:.2f}" for a in progress.acceptance)
        self.bar.set_postfix(figures, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


@app.command()
def train(
    target: str = typer.Argument(
        DEMO_TARGET, help="Target model: alias or GGUF path (default: the demo target)."
    ),
    text: list[Path] = typer.Option(
        [],
        "--text",
        exists=True,
        dir_okay=False,
        help='Also learn the target on this text: a text file, or JSONL of {"text": ...} or '
        '{"messages": [...]} lines (repeatable).',
    ),
    prompts: Path | None = typer.Option(
        None,
        "--prompts",
        exists=True,
        dir_okay=False,
        help='JSONL of {"prompt": ..., "template": "chat"|"raw"} the target answers '
        "(default: the built-in set of chat, code and prose).",
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", dir_okay=False, help="The head's GGUF (default: in the cache)."
    ),
    minutes: float | None = typer.Option(
        40.0, "--minutes", min=0.1, help="Training time, collecting the samples apart."
    ),
    steps: int | None = typer.Option(None, "--steps", min=1, help="At most this many steps."),
    answer_tokens: int = typer.Option(
        256, "--answer-tokens", min=1, max=896, help="Tokens per answer the target writes."
    ),
    draft_vocab: int | None = typer.Option(
        None,
        "--draft-vocab",
        min=1,
        help="Tokens the head drafts (default: those covering 99.5% of the target's choices).",
    ),
    unrolled: int = typer.Option(
        4, "--unrolled", min=1, max=8, help="Steps the head learns to draft on its own states."
    ),
    layers: str | None = typer.Option(
        None, "--layers", help="The three target layers the head reads (default: 2, mid, last-3)."
    ),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or mps."),
    threads: int | None = typer.Option(None, "--threads", min=1, help="CPU threads."),
    seed: int = typer.Option(0, "--seed", help="Seed of the sampled answers and the weights."),
) -> None:
    """Train an EAGLE-3 head on the target's own answers; a stopped run resumes."""
    if importlib.util.find_spec("torch") is None:
        raise SpecrunError(f"training a head needs torch: {TRAIN_EXTRA}")
    if device not in ("auto", "cpu", "cuda", "mps"):
        raise OptionError(f"--device is auto, cpu, cuda or mps: not {device!r}")
    from specrun.models.catalog import load_catalog, resolve_target
    from specrun.training.data import read_prompts
    from specrun.training.fit import Kept, TrainOptions, train_head

    path = resolve_target(target, catalog=load_catalog()).path
    out = out or heads_dir() / f"{path.stem}-eagle3.gguf"
    options = TrainOptions(
        texts=tuple(text),
        prompts=read_prompts(prompts) if prompts else None,
        answer_tokens=answer_tokens,
        minutes=minutes,
        steps=steps,
        draft_vocab=draft_vocab,
        unrolled=unrolled,
        device=device,  # type: ignore[arg-type]
        threads=threads,
        seed=seed,
        layers=_layers(layers),
    )
    note(f"training an EAGLE-3 head for {path.name} into {out} (a stopped run resumes)")
    bars = _Bars()
    kept = Kept.of(out)
    try:
        trained = train_head(path, out, options, bars, kept)
    except KeyboardInterrupt:
        bars.close()
        note(str(kept))
        raise
    finally:
        bars.close()
    acceptance = " ".join(f"{a:.2f}" for a in trained.acceptance)
    if trained.initial_acceptance:
        before = " ".join(f"{a:.2f}" for a in trained.initial_acceptance)
        acceptance = f"{acceptance} (untrained: {before})"
    print(
        f"wrote {trained.path}\n"
        f"  {trained.steps} steps ({trained.train_seconds / 60:.1f} min training, "
        f"{trained.collect_seconds / 60:.1f} min collecting), {trained.positions} positions "
        f"from {trained.samples} samples, draft vocabulary {trained.draft_vocab}\n"
        f"  held-out acceptance per drafted position: {acceptance}\n"
        f'  use it: specrun run -t {target} -d eagle3:{trained.path} --gamma auto "..."'
    )
