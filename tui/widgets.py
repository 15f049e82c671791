"""The chat screen's widgets: model bar, transcript with its messages, and the figures panel."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Iterable

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Label, Markdown, Sparkline, Static

from specrun.formatting import format_or_dash
from specrun.speculative import Segment
from specrun_tui.generation import Figures


class ModelBar(Static):
    pass


class UserMessage(Static):
    def __init__(self, text: str) -> None:
        super().__init__(Text(text), markup=False)


class Notice(Static):
    """A line from the app itself: dropped turns, a stopped answer, errors, /stats."""

    def __init__(self, text: str, *, error: bool = False) -> None:
        super().__init__(Text(text), markup=False, classes="error" if error else "")


class AnswerBlock(Static):
    """A stretch of a streaming answer. Only the last block of an answer grows, so a
    refresh re-renders at most one block, however long the answer is."""

    def __init__(self, segments: list[Segment]) -> None:
        super().__init__(markup=False)
        self.segments = segments

    def show(self, draft_style: Style | str, *, settled: bool) -> None:
        text = Text()
        for piece, from_draft in self.segments:
            text.append(piece, draft_style if from_draft else "")
        if settled and text.plain.endswith("\n"):  # the next block starts on the next line
            text.right_crop(1)
        # A layout of the screen costs several times a repaint, and most refreshes only
        # lengthen the last line: lay out only when the block's height changes.
        height = self.size.height
        self.update(text, layout=False)
        width = self.size.width
        if not width or self.get_content_height(self.size, self.size, width) != height:
            self.refresh(layout=True)

    @property
    def length(self) -> int:
        return sum(len(piece) for piece, _ in self.segments)


BLOCK_CHARS = 1500  # a growing block this long is settled at its last line break


def split_after_last_newline(segments: list[Segment]) -> tuple[list[Segment], list[Segment]]:
    """Segments up to and including the last line break, and the rest."""
    for i in range(len(segments) - 1, -1, -1):
        piece, from_draft = segments[i]
        cut = piece.rfind("\n") + 1
        if cut:
            rest = [(piece[cut:], from_draft)] if cut < len(piece) else []
            return segments[:i] + [(piece[:cut], from_draft)], rest + segments[i + 1 :]
    return [], segments


class AssistantMessage(Vertical):
    """An answer: live text while it streams; Markdown once finished, unless the draft
    colours are on, which colour the tokens that came from accepted drafts.

    The live text is a column of blocks; new text goes into the last one, and a block
    that grows past BLOCK_CHARS is settled, so appending costs the same at any length.
    """

    COMPONENT_CLASSES = {"answer--draft"}

    def __init__(self, *, show_origin: bool) -> None:
        super().__init__()
        self.finished = False
        self.show_origin = show_origin
        self._blocks = [AnswerBlock([])]
        self._live = Vertical(*self._blocks, classes="live")
        self._markdown = Markdown(classes="done")

    def compose(self) -> ComposeResult:
        yield self._live
        yield self._markdown

    def on_mount(self) -> None:
        self._show()

    @property
    def segments(self) -> list[Segment]:
        return [segment for block in self._blocks for segment in block.segments]

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.segments)

    def append(self, segments: Iterable[Segment]) -> None:
        growing = self._blocks[-1]
        growing.segments.extend(segments)
        if growing.length > BLOCK_CHARS:
            settled, rest = split_after_last_newline(growing.segments)
            if settled:
                growing.segments = settled
                growing.show(self._draft_style, settled=True)
                growing = AnswerBlock(rest)
                self._blocks.append(growing)
                self._live.mount(growing)
        growing.show(self._draft_style, settled=False)

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
            for block in self._blocks:
                block.show(self._draft_style, settled=block is not self._blocks[-1])

    @property
    def _draft_style(self) -> Style | str:
        return self.get_component_rich_style("answer--draft") if self.show_origin else ""


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
    """The live figures, each with a sparkline of its recent readings (one per round).

    Readings are recorded as they come (`add`); the rows are drawn by `redraw`, which
    the screen calls at its own pace, and only the rows whose text or line changed."""

    def __init__(self, policy: str, history: int = 60) -> None:
        super().__init__()
        self.latest = Figures.empty(policy)
        self.history = [deque[float](maxlen=history) for _ in FIGURE_ROWS]

    def compose(self) -> ComposeResult:
        for row in FIGURE_ROWS:
            yield Label(self._label(row), classes="figure")
            yield Sparkline([])

    def add(self, readings: Iterable[Figures]) -> None:
        """Record readings (oldest first); the labels will show the last one."""
        for figures in readings:
            self.latest = figures
            for row, history in zip(FIGURE_ROWS, self.history):
                value = row.value(figures)
                if value is not None:
                    history.append(value)

    def show(self, readings: Iterable[Figures]) -> None:
        self.add(readings)
        self.redraw()

    def reset(self) -> None:
        """Forget every reading (a new conversation)."""
        self.latest = Figures.empty(self.latest.policy)
        for history in self.history:
            history.clear()
        self.redraw()

    def show_policy(self, policy: str) -> None:
        self.latest = replace(self.latest, policy=policy)
        self.redraw()

    def redraw(self) -> None:
        labels = self.query(".figure").results(Label)
        sparklines = self.query(Sparkline).results()
        for row, history, label, sparkline in zip(FIGURE_ROWS, self.history, labels, sparklines):
            text = self._label(row)
            if text != label.content:
                label.update(text, layout=False)  # one line, always
            data = list(history)
            if data != sparkline.data:
                sparkline.data = data

    def _label(self, row: FigureRow) -> Text:
        return Text.assemble((f"{row.name:<14}", "dim"), row.shown(self.latest))
