"""The chat screen's widgets: model bar, transcript, the message box and the figures panel."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from rich.console import RenderableType
from rich.markdown import Markdown
from rich.segment import Segment as Cells
from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Label, Sparkline, Static, TextArea

from specrun.core.text import Segment
from specrun.system.formatting import format_or_dash
from specrun_tui.generation import Figures


class ModelBar(Static):
    pass


# Keys that start a new line in the message box. Shift+Enter, Ctrl+Enter and Alt+Enter reach
# the app only from terminals that speak kitty's keyboard protocol (Textual asks for it);
# elsewhere they send Enter's own byte. Ctrl+J sends a line feed, distinct from Enter's
# carriage return, in every terminal.
NEWLINE_KEYS = frozenset({"shift+enter", "ctrl+j", "ctrl+enter", "alt+enter"})


class MessageBox(TextArea):
    """The message being written, over as many lines as it takes: Enter sends it, a
    newline key (NEWLINE_KEYS) starts a new line, and a paste arrives whole, its lines and
    all (terminals paste line breaks as carriage returns: `message` reads them as breaks)."""

    @dataclass
    class Submitted(Message):
        box: MessageBox
        value: str

    def __init__(self, placeholder: str) -> None:
        super().__init__(soft_wrap=True, compact=True, placeholder=placeholder)

    @property
    def message(self) -> str:
        return self.text.replace("\r\n", "\n").replace("\r", "\n")

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()  # not a new line: TextArea's own handler does not run
            self.post_message(self.Submitted(self, self.message))
        elif event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")


class Transcript(ScrollView):
    """The conversation as lines, drawn a line at a time (Textual's line API).

    Each entry (a user message, an answer, a notice) keeps its lines rendered at the
    current width. A streaming answer re-renders only its unfinished last line, and a
    refresh repaints only the lines that changed: the cost of new text is the same at
    any length of answer or conversation. Its width never changes while text streams
    (the scrollbar is always there), so new lines move nothing else on the screen.
    """

    COMPONENT_CLASSES = {
        "transcript--user",
        "transcript--user-bar",
        "transcript--answer-bar",
        "transcript--draft",
        "transcript--notice",
        "transcript--summary",
        "transcript--error",
    }

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[Entry | Answer] = []
        self._lines: list[Strip] = []  # every entry's lines, in order
        self._width = 0  # the width they were rendered at
        self._styles: dict[str, Style] = {}  # the base style plus a component class's, by class

    @property
    def lines(self) -> list[Strip]:
        """What the transcript shows, every line of it (scrolled into view or not)."""
        return self._lines

    def add_user(self, text: str) -> None:
        self._add(Entry("user", Text(text)))

    def add_notice(self, text: str, *, error: bool = False) -> None:
        self._add(Entry("error" if error else "notice", Text(text)))

    def add_summary(self, text: str) -> None:
        """The one line of figures under an answer."""
        self._add(Entry("summary", Text(text)))

    def add_answer(self, text: str) -> None:
        """A finished answer (of a conversation loaded from a file)."""
        answer = Answer(self, show_origin=False)
        answer.segments.append((text, False))
        answer.finished = True
        self._add(answer)

    def drop_last_answer(self) -> None:
        """Forget what came after the last user message: its answer is being made again."""
        users = [
            i
            for i, entry in enumerate(self.entries)
            if isinstance(entry, Entry) and entry.kind == "user"
        ]
        del self.entries[users[-1] + 1 if users else 0 :]
        self._relayout()

    def start_answer(self, *, show_origin: bool) -> Answer:
        answer = Answer(self, show_origin=show_origin)
        self._add(answer)
        return answer

    def clear(self) -> None:
        self.entries.clear()
        self._relayout()

    def set_show_origin(self, show_origin: bool) -> None:
        for entry in self.entries:
            if isinstance(entry, Answer):
                entry.show_origin = show_origin
        self._relayout()

    def follow(self) -> None:
        self.scroll_end(animate=False, immediate=True)

    def _add(self, entry: Entry | Answer) -> None:
        self.entries.append(entry)
        self.redraw(entry)
        self.follow()

    # --- drawing ----------------------------------------------------------------------------

    def redraw(self, entry: Entry | Answer) -> None:
        """Render `entry` again (it changed) and repaint its lines and any that moved."""
        width = self.scrollable_content_region.width
        if width != self._width:
            self._relayout()
            return
        start = sum(e.line_count for e in self.entries[: self.entries.index(entry)])
        old_count = entry.line_count
        lines = entry.lines(self, width)
        self._lines[start : start + old_count] = lines
        unchanged = entry.unchanged_lines  # an answer keeps its finished lines
        if len(lines) != old_count:
            self._resize()
            self.refresh_lines(start + unchanged, len(self._lines) - start - unchanged)
        else:
            self.refresh_lines(start + unchanged, len(lines) - unchanged)

    def _relayout(self) -> None:
        self._width = self.scrollable_content_region.width
        self._lines = [
            line for entry in self.entries for line in entry.lines(self, self._width, again=True)
        ]
        self._resize()
        self.refresh()

    def _resize(self) -> None:
        # The height grows half a screen at a time: a new height lays out the whole screen
        # and scrolling repaints the whole transcript, so both happen once per
        # half screen of text rather than once per line.
        step = max(self.scrollable_content_region.height // 2, 1)
        self.virtual_size = Size(self._width, -(-len(self._lines) // step) * step)

    def on_resize(self) -> None:
        if self.scrollable_content_region.width != self._width:
            self._relayout()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles.clear()

    def style(self, component: str = "") -> Style:
        if component not in self._styles:
            base = self.rich_style
            self._styles[component] = (
                base + self.get_component_rich_style(component) if component else base
            )
        return self._styles[component]

    def render_line(self, y: int) -> Strip:
        index = self.scroll_offset.y + y
        width = self.scrollable_content_region.width
        if index >= len(self._lines):
            return Strip.blank(width, self.rich_style)
        return self._lines[index].crop_extend(0, width, self.rich_style)

    def render_text(
        self, renderable: RenderableType, width: int, *, bar: str | None, style: str = ""
    ) -> list[Strip]:
        """`renderable` as lines `width` wide: a blank line, then the text, one column
        in from a coloured bar (user messages, answers) or two in (notices)."""
        base = self.style()
        options = self.app.console.options.update_width(max(width - 3, 1))
        rendered = self.app.console.render_lines(renderable, options, style=self.style(style))
        left = [Cells("▌", self.style(bar)), Cells(" ", base)] if bar else [Cells("  ", base)]
        return [Strip.blank(width, base)] + [
            Strip([*left, *line, Cells(" ", base)], width) for line in rendered
        ]


@dataclass
class Entry:
    """A user message or a notice: text that does not change."""

    kind: str  # "user", "notice", "summary" or "error"
    text: Text
    line_count: int = 0
    unchanged_lines: int = 0

    def lines(self, transcript: Transcript, width: int, *, again: bool = False) -> list[Strip]:
        bar, style = (
            ("transcript--user-bar", "transcript--user")
            if self.kind == "user"
            else (None, f"transcript--{self.kind}")
        )
        lines = transcript.render_text(self.text, width, bar=bar, style=style)
        self.line_count = len(lines)
        return lines


class Answer:
    """An answer: live text while it streams, Markdown once finished, unless the draft
    colours are on, which colour the tokens that came from accepted drafts.

    While it streams, the lines up to its last line break are kept as rendered; a
    refresh renders only the text after it."""

    def __init__(self, transcript: Transcript, *, show_origin: bool) -> None:
        self.transcript = transcript
        self.show_origin = show_origin
        self.finished = False
        self.segments: list[Segment] = []
        self.line_count = 0
        self.unchanged_lines = 0  # of the lines last returned, those the call before had too
        self._text = Text()  # the segments, draft ones coloured if `show_origin`
        self._coloured = show_origin  # what `_text` was built for
        self._line_end = 0  # characters up to the last line break of `_text`
        self._settled: list[
            Strip
        ] = []  # the blank line above, then the lines of the text up to `_settled_at`
        self._settled_at = 0  # characters

    @property
    def text(self) -> str:
        return "".join(piece for piece, _ in self.segments)

    def append(self, segments: Iterable[Segment]) -> None:
        for segment in segments:
            self.segments.append(segment)
            self._add(*segment)
        self.transcript.redraw(self)
        self.transcript.follow()

    def finish(self) -> None:
        self.finished = True
        self.transcript.redraw(self)

    def lines(self, transcript: Transcript, width: int, *, again: bool = False) -> list[Strip]:
        if again or self._coloured != self.show_origin:
            self._settled, self._settled_at = [], 0
        if self.finished and not self.show_origin:
            lines = transcript.render_text(Markdown(self.text), width, bar="transcript--answer-bar")
            self.unchanged_lines, self.line_count = 0, len(lines)
            return lines
        if self._coloured != self.show_origin:
            self._text, self._line_end, self._coloured = Text(), 0, self.show_origin
            for segment in self.segments:
                self._add(*segment)
        if not self._settled:
            self._settled = [Strip.blank(width, transcript.style())]
        kept = len(self._settled)
        if self._line_end > self._settled_at:  # whole lines came: render them once
            whole = self._text[self._settled_at : self._line_end - 1]
            self._settled += transcript.render_text(whole, width, bar="transcript--answer-bar")[1:]
            self._settled_at = self._line_end
        rest = self._text[self._settled_at :]
        tail = (
            transcript.render_text(rest, width, bar="transcript--answer-bar")[1:]
            if rest or kept == 1
            else []
        )
        self.unchanged_lines = kept
        lines = self._settled + tail
        self.line_count = len(lines)
        return lines

    def _add(self, piece: str, from_draft: bool) -> None:
        if self._coloured and from_draft:
            self._text.append(piece, self.transcript.style("transcript--draft"))
        else:
            self._text.append(piece)
        if "\n" in piece:
            self._line_end = len(self._text) - len(piece) + piece.rfind("\n") + 1


# --- the figures panel -----------------------------------------------------------------


@dataclass(frozen=True)
class FigureRow:
    name: str
    value: Callable[[Figures], float | None]  # what the sparkline plots
    shown: Callable[[Figures], str]


FIGURE_ROWS = [
    FigureRow(
        "tok/s now",
        lambda f: f.recent_tokens_per_second,
        lambda f: format_or_dash(f.recent_tokens_per_second, ".1f"),
    ),
    FigureRow(
        "tok/s answer",
        lambda f: f.tokens_per_second,
        lambda f: format_or_dash(f.tokens_per_second, ".1f"),
    ),
    FigureRow(
        "acceptance",
        lambda f: f.acceptance_rate,
        lambda f: format_or_dash(f.acceptance_rate and f.acceptance_rate * 100, ".0f", "%"),
    ),
    FigureRow("γ", lambda f: f.gamma, lambda f: f"{format_or_dash(f.gamma, 'd')} ({f.policy})"),
    FigureRow(
        "accepted/pass",
        lambda f: f.mean_accepted_length,
        lambda f: format_or_dash(f.mean_accepted_length, ".2f"),
    ),
    FigureRow(
        "est. speedup",
        lambda f: f.estimated_speedup,
        lambda f: format_or_dash(f.estimated_speedup, ".2f", "x"),
    ),
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
