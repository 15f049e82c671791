"""The chat screen's widgets: model bar, transcript with its messages, and the figures panel."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Label, Markdown, Sparkline, Static

from specrun.formatting import format_or_dash
from specrun.speculative import Segment
from specrun_tui.generation import Figures

if TYPE_CHECKING:
    from specrun.engine import Engine


def engine_summary(engine: "Engine") -> str:
    """Target, draft, device and GPU layers, for the bar at the top."""
    where = engine.placement()
    device, layers = where["device"], " + ".join(where["gpu_layers"])
    draft_name = engine.draft.name if engine.draft else "none"
    return f"target {engine.target.name}  ·  draft {draft_name}  ·  {device}  ·  GPU layers {layers}"


class ModelBar(Static):
    pass


class UserMessage(Static):
    def __init__(self, text: str) -> None:
        super().__init__(Text(text), markup=False)


class Notice(Static):
    """A line from the app itself: dropped turns, a stopped answer, errors, /stats."""

    def __init__(self, text: str, *, error: bool = False) -> None:
        super().__init__(Text(text), markup=False, classes="error" if error else "")


class AssistantMessage(Vertical):
    """An answer: live text while it streams; Markdown once finished, unless the draft
    colours are on, which colour the tokens that came from accepted drafts."""

    COMPONENT_CLASSES = {"answer--draft"}

    def __init__(self, *, show_origin: bool) -> None:
        super().__init__()
        self.segments: list[Segment] = []
        self.finished = False
        self.show_origin = show_origin
        self._live = Static(classes="live", markup=False)
        self._markdown = Markdown(classes="done")

    def compose(self) -> ComposeResult:
        yield self._live
        yield self._markdown

    def on_mount(self) -> None:
        self._show()

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.segments)

    def append(self, segments: Iterable[Segment]) -> None:
        self.segments.extend(segments)
        self._live.update(self.live_text())

    async def finish(self) -> None:
        self.finished = True
        await self._markdown.update(self.text)
        self._show()

    def set_show_origin(self, show_origin: bool) -> None:
        self.show_origin = show_origin
        self._show()

    def _show(self) -> None:
        markdown = self.finished and not self.show_origin
        self._live.display = not markdown
        self._markdown.display = markdown
        if not markdown:
            self._live.update(self.live_text())

    def live_text(self) -> Text:
        """The answer as text, drafted tokens coloured when the draft colours are on."""
        draft_style = self.get_component_rich_style("answer--draft") if self.show_origin else ""
        text = Text()
        for piece, from_draft in self.segments:
            text.append(piece, draft_style if from_draft else "")
        return text


class Transcript(VerticalScroll):
    def add_user(self, text: str) -> None:
        self._add(UserMessage(text))

    async def start_answer(self, *, show_origin: bool) -> AssistantMessage:
        """Mount an empty answer; once this returns, it is ready to take text."""
        answer = AssistantMessage(show_origin=show_origin)
        await self.mount(answer)
        self.call_after_refresh(self.follow)
        return answer

    def add_notice(self, text: str, *, error: bool = False) -> None:
        self._add(Notice(text, error=error))

    def set_show_origin(self, show_origin: bool) -> None:
        for answer in self.query(AssistantMessage):
            answer.set_show_origin(show_origin)

    def follow(self) -> None:
        self.scroll_end(animate=False)

    def _add(self, widget: Widget) -> None:
        self.mount(widget)
        self.call_after_refresh(self.follow)


# --- the figures panel -----------------------------------------------------------------


@dataclass(frozen=True)
class FigureRow:
    name: str
    value: Callable[[Figures], float | None]  # what the sparkline plots
    shown: Callable[[Figures], str]


FIGURE_ROWS = [
    FigureRow("tok/s now", lambda f: f.recent_tokens_per_second,
              lambda f: format_or_dash(f.recent_tokens_per_second, ".1f")),
    FigureRow("tok/s answer", lambda f: f.tokens_per_second,
              lambda f: format_or_dash(f.tokens_per_second, ".1f")),
    FigureRow("acceptance", lambda f: f.acceptance_rate,
              lambda f: format_or_dash(f.acceptance_rate and f.acceptance_rate * 100, ".0f", "%")),
    FigureRow("γ", lambda f: f.gamma, lambda f: f"{format_or_dash(f.gamma, 'd')} ({f.policy})"),
    FigureRow("accepted/pass", lambda f: f.mean_accepted_length,
              lambda f: format_or_dash(f.mean_accepted_length, ".2f")),
    FigureRow("est. speedup", lambda f: f.estimated_speedup,
              lambda f: format_or_dash(f.estimated_speedup, ".2f", "x")),
]


class FiguresPanel(Vertical):
    """The live figures, each with a sparkline of its recent readings (one per round)."""

    def __init__(self, policy: str, history: int = 60) -> None:
        super().__init__()
        self.latest = Figures.empty(policy)
        self.history = [deque[float](maxlen=history) for _ in FIGURE_ROWS]

    def compose(self) -> ComposeResult:
        for row in FIGURE_ROWS:
            yield Label(self._label(row), classes="figure")
            yield Sparkline([])

    def show(self, readings: Iterable[Figures]) -> None:
        """Add readings (oldest first); the labels show the last one."""
        for figures in readings:
            self.latest = figures
            for row, history in zip(FIGURE_ROWS, self.history):
                value = row.value(figures)
                if value is not None:
                    history.append(value)
        self._update()

    def reset(self) -> None:
        """Forget every reading (a new conversation)."""
        self.latest = Figures.empty(self.latest.policy)
        for history in self.history:
            history.clear()
        self._update()

    def show_policy(self, policy: str) -> None:
        self.latest = replace(self.latest, policy=policy)
        self._update()

    def _update(self) -> None:
        labels = self.query(".figure").results(Label)
        sparklines = self.query(Sparkline).results()
        for row, history, label, sparkline in zip(FIGURE_ROWS, self.history, labels, sparklines):
            label.update(self._label(row))
            sparkline.data = list(history)

    def _label(self, row: FigureRow) -> Text:
        return Text.assemble((f"{row.name:<14}", "dim"), row.shown(self.latest))
