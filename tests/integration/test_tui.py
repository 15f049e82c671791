"""The Textual chat against the tiny generated models: real engine, in its own process."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from rich.text import Text
from textual import events
from textual.pilot import Pilot
from textual.widgets import Sparkline

from specrun.conversation_file import load_conversation
from specrun.core.loop import Prefill, Round
from specrun.core.sampling import SamplingParams
from specrun.core.stats import Stats
from specrun.engine import Engine
from specrun.errors import SpecrunError
from specrun.options import PROMPT_LOOKUP, DraftOptions, LoadOptions, PromptLookup
from specrun.prompt import Message, render
from specrun.system.formatting import format_or_dash
from specrun_tui import SpecrunApp
from specrun_tui.engine_process import EngineProcess
from specrun_tui.generation import Figures, summary_line
from specrun_tui.screens import ChatScreen, HelpScreen, LoadingScreen
from specrun_tui.widgets import (
    Answer,
    Entry,
    FiguresPanel,
    MessageBox,
    ModelBar,
    Transcript,
)

GREEDY = SamplingParams(temperature=0.0, seed=1)


# The loaders run in the engine process, so they are module-level functions (they pickle).


def load(target: Path, draft: Path) -> Engine:
    # γ fixed so which tokens came from the draft does not depend on timings.
    return Engine.load(target, draft, params=GREEDY, drafting=DraftOptions(gamma="3"))


def load_once(gate: Path, target: Path, draft: Path) -> Engine:
    """Load when `gate` exists: the loading screen can be seen meanwhile."""
    for _ in range(400):
        if gate.exists():
            break
        time.sleep(0.05)
    return load(target, draft)


def draft_for(target: Path, spec: str) -> Callable[[], Engine]:
    """`/draft SPEC` for the tiny models, as the command line resolves `--draft`: a draft
    file, `lookup` or `none`; anything else names no draft."""
    drafts: dict[str, Path | PromptLookup | None] = {"lookup": PROMPT_LOOKUP, "none": None}
    if spec not in drafts and not Path(spec).is_file():
        raise SpecrunError(f"no draft {spec}: no such file")
    draft = drafts[spec] if spec in drafts else Path(spec)
    return partial(Engine.load, target, draft, params=GREEDY, drafting=DraftOptions(gamma="3"))


def fail() -> Engine:
    raise SpecrunError("model file not found: nowhere.gguf")


def crash() -> Engine:
    os.kill(os.getpid(), signal.SIGSEGV)  # as llama.cpp would die on a bad file
    raise AssertionError("unreachable")


@pytest.fixture
def engine(tiny_target: Path, tiny_draft: Path):
    with EngineProcess(
        partial(load, tiny_target, tiny_draft), load_draft=partial(draft_for, tiny_target)
    ) as engine:
        yield engine


async def loaded(pilot: Pilot) -> ChatScreen:
    await until(pilot, lambda: isinstance(pilot.app.screen, ChatScreen), timeout=60)
    await pilot.pause()
    return pilot.app.screen


async def until(pilot: Pilot, condition, timeout: float = 20.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("timed out")


async def say(pilot: Pilot, text: str) -> ChatScreen:
    """Type a line into the message box, press Enter and wait until any answer is done
    (and any command the engine carries out)."""
    screen = await loaded(pilot)
    screen.query_one(MessageBox).load_text(text)
    await pilot.press("enter")
    await until(pilot, lambda: not screen.generating and screen.busy is None, timeout=60)
    await pilot.pause()
    return screen


def notices(screen: ChatScreen) -> list[str]:
    return [
        e.text.plain
        for e in screen.transcript.entries
        if isinstance(e, Entry) and e.kind in ("notice", "error")
    ]


def summaries(screen: ChatScreen) -> list[str]:
    return [
        e.text.plain
        for e in screen.transcript.entries
        if isinstance(e, Entry) and e.kind == "summary"
    ]


def answers(screen: ChatScreen) -> list[Answer]:
    return [entry for entry in screen.transcript.entries if isinstance(entry, Answer)]


def shown(transcript: Transcript) -> str:
    return "\n".join(line.text.rstrip() for line in transcript.lines)


def greedy_answer(target: Path, draft: Path, messages: list[Message], max_tokens: int) -> str:
    with load(target, draft) as engine:
        tokens = render(engine.target, messages)
        return "".join(
            e.text for e in engine.stream(tokens, max_tokens=max_tokens) if isinstance(e, Round)
        )


@pytest.mark.asyncio
async def test_answer_streams_into_the_transcript_and_figures_fill_the_panel(
    engine, tiny_target, tiny_draft
):
    app = SpecrunApp(engine, max_tokens=24)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await say(pilot, "hello world")
        [user, answer, summary, _] = screen.transcript.entries
        assert user.kind == "user" and user.text.plain == "hello world"
        assert "▌ hello world" in shown(screen.transcript)
        expected = greedy_answer(tiny_target, tiny_draft, [Message("user", "hello world")], 24)
        assert answer.text == expected and expected and answer.finished
        # The panel shows the last answer's figures, as Stats computed them.
        stats = screen.last_stats
        assert stats.generated == 24 and stats.finish_reason == "length"
        panel = screen.query_one(FiguresPanel)
        assert panel.latest.tokens_per_second == stats.tokens_per_second
        assert panel.latest.acceptance_rate == stats.acceptance_rate
        assert panel.latest.gamma == 3 and panel.latest.policy == "fixed:3"
        assert all(sparkline.data for sparkline in panel.query(Sparkline))
        labels = " ".join(str(label.render()) for label in panel.query(".figure"))
        assert f"{stats.acceptance_rate * 100:.0f}%" in labels and "(fixed:3)" in labels
        assert "stopped at the token limit" in notices(screen)[-1]
        # Under the answer, one line of its figures: the very ones Stats computed.
        assert summary.kind == "summary"
        first = stats.time_to_first_token
        ttft = f"{first * 1000:.0f} ms" if first < 1 else f"{first:.2f} s"
        assert summary.text.plain == (
            f"24 tokens · {stats.tokens_per_second:.1f} tok/s · "
            f"TTFT {ttft} · draft draft.gguf · "
            f"est. speedup {format_or_dash(stats.estimated_speedup, '.2f', 'x')}"
        )
        assert summary.text.plain in shown(screen.transcript)


@pytest.mark.asyncio
async def test_a_stopped_answer_leaves_the_app_ready_for_the_next(engine, tiny_target, tiny_draft):
    app = SpecrunApp(engine, max_tokens=900)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await loaded(pilot)
        # Stop (what Escape does) before the engine's first round: the tiny model would
        # finish 900 tokens before a simulated key press could reach it. The loop polls the pipe.
        screen.send("the cat")
        screen.action_stop()
        await until(pilot, lambda: not screen.generating)
        assert screen.last_stats.finish_reason == "cancelled"
        assert notices(screen) == ["stopped"]

        await pilot.press(*"/set max_tokens 8", "enter")
        await say(pilot, "the dog")
        assert screen.last_stats.finish_reason == "length" and screen.last_stats.generated == 8
        stopped, answer = answers(screen)
        # The stopped reply stayed in the conversation, so the next turn followed it.
        turns = [
            Message("user", "the cat"),
            Message("assistant", stopped.text),
            Message("user", "the dog"),
        ]
        assert answer.text == greedy_answer(tiny_target, tiny_draft, turns, 8)


@pytest.mark.asyncio
async def test_slash_commands_change_the_settings(engine, tiny_target, tiny_draft):
    app = SpecrunApp(engine, max_tokens=8)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await say(pilot, "/set temp 0.5")
        assert engine.params.temperature == 0.5
        await say(pilot, "/set top-k 7")
        assert engine.params.top_k == 7
        await say(pilot, "/set seed none")
        assert engine.params.seed is None
        await say(pilot, "/set gamma heuristic")
        assert engine.policy == "heuristic"
        assert screen.query_one(FiguresPanel).latest.policy == "heuristic"

        # Each setting is confirmed in the transcript, in one line.
        assert notices(screen) == [
            "set temperature = 0.5",
            "set top_k = 7",
            "set seed = none",
            "set γ policy = heuristic",
        ]

        await say(pilot, "/set top_p 2")
        await say(pilot, "/set gamma many")
        await say(pilot, "/set temp warm")
        await say(pilot, "/set")
        await say(pilot, "/frobnicate")
        # What cannot be set is refused, in one line naming the command.
        assert notices(screen)[4:] == [
            "/set: `top_p` must be in (0, 1], got 2.0",
            "/set: `gamma` must be auto, heuristic or a number, got 'many'",
            "/set temp: 'warm' is not a number",
            "usage: /set NAME VALUE, NAME one of temp, top_k, top_p, min_p, seed, max_tokens, "
            "gamma",
            "unknown command /frobnicate; /help lists the commands",
        ]
        errors = [
            e for e in screen.transcript.entries if isinstance(e, Entry) and e.kind == "error"
        ]
        assert len(errors) == 5
        assert (
            engine.params.top_p == 0.95 and engine.policy == "heuristic"
        )  # refused values change nothing

        await say(pilot, "/stats")
        assert notices(screen)[-1] == "/stats: no answer yet"
        # The engine process carries the settings out: greedy, γ 3 and the system prompt
        # give the answer a loaded engine gives.
        for line in ("/set temp 0", "/set seed 1", "/set gamma 3", "/system Be brief.", "hello"):
            await say(pilot, line)
        assert max(screen.last_stats.gamma_trace) == 3
        brief = [Message("system", "Be brief."), Message("user", "hello")]
        expected = greedy_answer(tiny_target, tiny_draft, brief, 8)
        assert answers(screen)[-1].text == expected
        await say(pilot, "/stats")
        assert notices(screen)[-1] == "\n".join(screen.last_stats.summary_lines())

        await say(pilot, "/clear")
        assert not screen.transcript.entries and not screen.transcript.lines
        await say(pilot, "hello")  # the conversation starts over, with the system prompt
        assert answers(screen)[-1].text == expected


def user_texts(screen: ChatScreen) -> list[str]:
    return [e.text.plain for e in screen.transcript.entries if getattr(e, "kind", "") == "user"]


PASTED = "Fix the typo in this list:\r- apples\r- bananna\r\r- cherries"  # as terminals paste


@pytest.mark.asyncio
async def test_a_pasted_text_is_sent_whole_and_newline_keys_add_lines(
    engine, tiny_target, tiny_draft
):
    app = SpecrunApp(engine, max_tokens=8)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await loaded(pilot)
        box = screen.query_one(MessageBox)
        app.post_message(events.Paste(PASTED))  # as the driver does with a bracketed paste
        await pilot.pause()
        await pilot.press("enter")
        await until(pilot, lambda: not screen.generating)
        whole = "Fix the typo in this list:\n- apples\n- bananna\n\n- cherries"
        assert user_texts(screen) == [whole] and box.text == ""
        assert "▌ - bananna" in shown(screen.transcript)  # each line shown
        first = greedy_answer(tiny_target, tiny_draft, [Message("user", whole)], 8)
        assert answers(screen)[0].text == first  # the engine answered all of it

        # Shift+Enter (kitty's keyboard protocol) and Ctrl+J (any terminal) start new lines.
        await pilot.press(*"one", "shift+enter", *"two", "ctrl+j", *"three")
        assert box.text == "one\ntwo\nthree"
        await pilot.press("enter")
        await until(pilot, lambda: not screen.generating)
        assert user_texts(screen)[-1] == "one\ntwo\nthree"
        turns = [
            Message("user", whole),
            Message("assistant", first),
            Message("user", "one\ntwo\nthree"),
        ]
        assert answers(screen)[-1].text == greedy_answer(tiny_target, tiny_draft, turns, 8)

        # A message sent while an answer is under way stays in the box.
        screen.send("a long one")
        box.load_text("wait for me")
        await pilot.press("enter")
        assert box.text == "wait for me"
        await until(pilot, lambda: not screen.generating)


@pytest.mark.asyncio
async def test_retry_answers_the_last_message_again_in_place(engine, tiny_target, tiny_draft):
    app = SpecrunApp(engine, max_tokens=8)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await say(pilot, "/retry")
        assert notices(screen)[-1] == "/retry: no answer to retry yet"
        await say(pilot, "/set temp 1.5")
        await say(pilot, "/set seed none")
        await say(pilot, "the cat")
        first = answers(screen)[0].text
        await say(pilot, "/retry")
        [retried] = answers(screen)  # in place of the first
        assert user_texts(screen) == ["the cat"] and len(summaries(screen)) == 1
        # The conversation holds the new answer: the next turn follows it, not the first.
        await say(pilot, "/set temp 0")
        await say(pilot, "/set seed 1")
        await say(pilot, "and the dog")
        turns = [
            Message("user", "the cat"),
            Message("assistant", retried.text),
            Message("user", "and the dog"),
        ]
        assert answers(screen)[-1].text == greedy_answer(tiny_target, tiny_draft, turns, 8)
        assert retried.text != first or not first  # sampled at 1.5: another answer


@pytest.mark.asyncio
async def test_draft_switches_the_draft_and_keeps_the_conversation(
    engine, tiny_target, tiny_draft, tiny_foreign
):
    app = SpecrunApp(engine, max_tokens=8)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await say(pilot, "hello world")
        first = answers(screen)[0].text
        await say(pilot, "/draft lookup")
        assert notices(screen)[-2:] == [
            "loading the draft lookup…",
            "draft lookup, γ policy fixed:3",
        ]
        assert "draft lookup" in str(screen.query_one(ModelBar).render())
        await say(pilot, "and then")
        assert "· draft lookup ·" in summaries(screen)[-1]
        # Greedy output is the target's whatever the draft: the conversation went on.
        turns = [
            Message("user", "hello world"),
            Message("assistant", first),
            Message("user", "and then"),
        ]
        assert answers(screen)[-1].text == greedy_answer(tiny_target, tiny_draft, turns, 8)

        # What cannot be a draft is refused in one line, and the draft stays.
        await say(pilot, "/draft nowhere.gguf")
        assert notices(screen)[-1] == "/draft: no draft nowhere.gguf: no such file"
        await say(pilot, f"/draft {tiny_foreign}")  # loads, but its vocabulary is another's
        refusal = notices(screen)[-1]
        assert refusal.startswith("/draft: ") and refusal.endswith("; the draft stays lookup")
        assert "\n" not in refusal and engine.draft == "lookup"
        await say(pilot, "/draft none")
        assert notices(screen)[-1] == "no draft: plain decoding" and engine.draft == "none"
        await say(pilot, "and then?")
        assert summaries(screen)[-1].split(" · ")[3] == "no draft"
        turns += [Message("assistant", answers(screen)[1].text), Message("user", "and then?")]
        assert answers(screen)[-1].text == greedy_answer(tiny_target, tiny_draft, turns, 8)


@pytest.mark.asyncio
async def test_save_and_load_a_conversation(engine, tiny_target, tiny_draft, tmp_path):
    saved = tmp_path / "chat.json"
    app = SpecrunApp(engine, max_tokens=8)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await say(pilot, "/system Be brief.")
        await say(pilot, "hello")
        await say(pilot, "the cat")
        texts = [answer.text for answer in answers(screen)]
        await say(pilot, f"/save {saved}")
        assert notices(screen)[-1] == f"saved 2 exchanges to {saved}"
        assert [m.content for m in load_conversation(saved).messages] == [
            "hello",
            texts[0],
            "the cat",
            texts[1],
        ]

        await say(pilot, "/clear")
        await say(pilot, "/system")
        await say(pilot, "something else")
        await say(pilot, f"/load {saved}")
        assert notices(screen)[-1] == f"loaded 2 exchanges from {saved}"
        assert user_texts(screen) == ["hello", "the cat"]
        assert [answer.text for answer in answers(screen)] == texts
        # The next answer follows the loaded conversation, its system prompt too.
        await say(pilot, "and the dog")
        turns = [
            Message("system", "Be brief."),
            Message("user", "hello"),
            Message("assistant", texts[0]),
            Message("user", "the cat"),
            Message("assistant", texts[1]),
            Message("user", "and the dog"),
        ]
        assert answers(screen)[-1].text == greedy_answer(tiny_target, tiny_draft, turns, 8)

        # What cannot be loaded or saved is refused in one line; the conversation stays.
        bad = tmp_path / "bad.json"
        bad.write_text("{}")
        await say(pilot, f"/load {bad}")
        assert notices(screen)[-1].startswith(f"/load: {bad} is not a conversation file")
        await say(pilot, f"/save {tmp_path / 'nowhere' / 'chat.json'}")
        assert notices(screen)[-1].startswith("/save: cannot save the conversation to ")
        await say(pilot, "/load")
        assert notices(screen)[-1] == "usage: /load FILE"
        assert "\n" not in "".join(notices(screen)[-3:])
        assert user_texts(screen) == ["hello", "the cat", "and the dog"]


@pytest.mark.asyncio
async def test_a_resumed_conversation_goes_on(tiny_target, tiny_draft, tmp_path):
    saved = tmp_path / "chat.json"
    turns = [Message("user", "hello"), Message("assistant", "Hello! How can I help?")]
    saved.write_text(
        json.dumps(
            {
                "format": "specrun.conversation",
                "version": 1,
                "system": None,
                "messages": [{"role": m.role, "content": m.content} for m in turns],
            }
        )
    )
    resume = load_conversation(saved)
    with EngineProcess(partial(load, tiny_target, tiny_draft), resume=resume) as engine:
        app = SpecrunApp(engine, max_tokens=8)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await loaded(pilot)
            assert user_texts(screen) == ["hello"] and notices(screen) == ["resumed 1 exchange"]
            assert "Hello! How can I help?" in shown(screen.transcript)
            await say(pilot, "the cat")
            turns.append(Message("user", "the cat"))
            assert answers(screen)[-1].text == greedy_answer(tiny_target, tiny_draft, turns, 8)


@pytest.mark.asyncio
async def test_help_screen_opens_and_closes(engine):
    app = SpecrunApp(engine)
    async with app.run_test() as pilot:
        await say(pilot, "/help")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, ChatScreen)
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)


@pytest.mark.asyncio
async def test_draft_colours_toggle(engine):
    app = SpecrunApp(engine, max_tokens=24)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await say(pilot, "hello world")
        [answer] = answers(screen)
        drafted = "".join(piece for piece, from_draft in answer.segments if from_draft)
        assert drafted
        draft_style = screen.transcript.get_component_rich_style("transcript--draft")
        assert draft_style.color is not None

        def coloured() -> str:
            cells = [cell for line in screen.transcript.lines for cell in line]
            return "".join(
                cell.text for cell in cells if cell.style and cell.style.color == draft_style.color
            )

        assert not coloured()
        await pilot.press("ctrl+o")
        assert "".join(coloured().split()) == "".join(
            drafted.split()
        )  # wrapping takes the spaces at line ends
        await pilot.press("ctrl+o")
        assert not coloured()


@pytest.mark.asyncio
async def test_a_long_answer_renders_only_its_last_line_per_refresh(engine):
    """Lines up to the last line break are rendered once, so new text costs the same at any
    length."""
    app = SpecrunApp(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        transcript = (await loaded(pilot)).transcript
        rendered: list[str] = []
        render_text = transcript.render_text

        def counting(renderable, width, **style):
            rendered.append(renderable.plain)
            return render_text(renderable, width, **style)

        transcript.render_text = counting
        answer = transcript.start_answer(show_origin=True)
        lines = [(f"line {i} ", i % 2 == 0) for i in range(1000)]
        for i in range(0, len(lines), 7):  # as refreshes bring them: a few segments at a time
            rendered.clear()
            answer.append(
                [
                    (text + "\n" if from_draft else text, from_draft)
                    for text, from_draft in lines[i : i + 7]
                ]
            )
            assert (
                sum(len(text) for text in rendered) <= 7 * 10 + 10
            )  # what came, and the unfinished line before it
        await pilot.pause()
        assert answer.segments == [(t + "\n" if d else t, d) for t, d in lines]
        assert shown(transcript).splitlines()[-500:] == [
            f"▌ {line}".rstrip() for line in answer.text.splitlines()[-500:]
        ]
        assert transcript.scroll_offset.y == transcript.max_scroll_y > 0  # it follows the answer


@pytest.mark.asyncio
async def test_an_answer_shows_as_markdown_once_finished(engine):
    app = SpecrunApp(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        transcript = (await loaded(pilot)).transcript
        answer = transcript.start_answer(show_origin=False)
        answer.append([("Use **bold** and `code`.\n", False), ("- one\n- two", True)])
        assert "Use **bold** and `code`." in shown(transcript)  # live: as it came
        answer.finish()
        assert "Use bold and code." in shown(transcript) and "• one" in shown(transcript)
        await pilot.resize_terminal(60, 40)
        await pilot.pause()
        assert all(
            len(line.text) <= 60 for line in transcript.lines
        )  # rendered again at the new width
        assert "Use bold and code." in shown(transcript)


@pytest.mark.asyncio
async def test_the_models_load_behind_a_loading_screen(tiny_target, tiny_draft, tmp_path):
    gate = tmp_path / "load now"
    with EngineProcess(partial(load_once, gate, tiny_target, tiny_draft)) as engine:
        app = SpecrunApp(engine, loading="target and draft")
        async with app.run_test() as pilot:
            await pilot.pause(0.5)
            assert isinstance(app.screen, LoadingScreen)  # the app is alive while the engine loads
            assert "Loading target and draft" in str(
                app.screen.query_one("#loading-status").render()
            )
            gate.touch()
            screen = await loaded(pilot)
            assert "target target.gguf" in str(screen.query_one(ModelBar).render())
            await say(pilot, "/set gamma 2")
            assert engine.policy == "fixed:2"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "loader, shown",
    [
        (fail, "model file not found: nowhere.gguf"),
        (crash, "llama.cpp crashed with a segmentation fault"),
    ],
)
async def test_a_load_error_or_crash_is_shown_in_the_app(loader, shown):
    with EngineProcess(loader) as engine:
        app = SpecrunApp(engine)
        async with app.run_test(size=(160, 30)) as pilot:
            await until(
                pilot, lambda: shown in str(app.screen.query_one("#loading-status").render())
            )
            assert isinstance(app.screen, LoadingScreen) and app.is_running


# --- snapshots ------------------------------------------------------------------------------
# The transcript comes from a greedy run with a fixed γ, so it is the same every time;
# the measured timings are not, so after the answer the panel is reset and fed readings
# from a Stats built from rounds with fixed timings (through the panel's public methods),
# which keeps every figure a Stats figure and the picture stable.

KNOWN_ROUNDS = [  # (γ, drafted, accepted, draft s, verify s, overhead s)
    (3, 3, 3, 0.006, 0.020, 0.001),
    (3, 3, 1, 0.006, 0.020, 0.001),
    (3, 3, 2, 0.006, 0.021, 0.001),
    (3, 3, 0, 0.006, 0.020, 0.001),
    (3, 3, 3, 0.006, 0.019, 0.001),
    (3, 3, 3, 0.006, 0.020, 0.001),
]


def known_readings() -> tuple[Stats, list[Figures]]:
    """A Stats of the known rounds, and the panel's reading after each."""
    stats, readings = Stats(), []
    stats.add(Prefill(prompt_tokens=20, evaluated=20, seconds=0.05))
    for gamma, drafted, accepted, draft_s, verify_s, overhead_s in KNOWN_ROUNDS:
        tokens = tuple(range(accepted + 1))
        stats.add(
            Round(
                tokens,
                (True,) * accepted + (False,),
                (),
                gamma,
                drafted,
                accepted,
                draft_s,
                verify_s,
                overhead_s,
            )
        )
        readings.append(Figures.read(stats, "fixed:3"))
    return stats, readings


def load_on_cpu(target: Path, draft: Path) -> Engine:
    """No GPU layers, so the bar reads the same on any build of llama.cpp."""
    options = LoadOptions(gpu_layers=0, draft_gpu_layers=0)
    return Engine.load(
        target, draft, options=options, params=GREEDY, drafting=DraftOptions(gamma="3")
    )


@pytest.fixture
def cpu_engine(tiny_target: Path, tiny_draft: Path):
    with EngineProcess(partial(load_on_cpu, tiny_target, tiny_draft)) as engine:
        yield engine


def test_snapshot_of_the_chat_after_an_answer(snap_compare, cpu_engine):
    async def answer_then_fix_the_figures(pilot: Pilot) -> None:
        screen = await loaded(pilot)
        screen.query_one(MessageBox).cursor_blink = False
        await say(pilot, "hello world")
        stats, readings = known_readings()
        panel = screen.query_one(FiguresPanel)
        panel.reset()
        panel.show(readings)
        [summary] = [e for e in screen.transcript.entries if getattr(e, "kind", "") == "summary"]
        summary.text = Text(summary_line(stats, "draft.gguf"))
        screen.transcript.redraw(summary)

    app = SpecrunApp(cpu_engine, max_tokens=24)
    assert snap_compare(app, run_before=answer_then_fix_the_figures, terminal_size=(110, 32))


def test_snapshot_of_the_help_screen(snap_compare, cpu_engine):
    async def stop_the_cursor_blinking(pilot: Pilot) -> None:
        screen = await loaded(pilot)
        screen.query_one(MessageBox).cursor_blink = False

    app = SpecrunApp(cpu_engine)
    assert snap_compare(
        app, run_before=stop_the_cursor_blinking, press=["f1"], terminal_size=(110, 32)
    )
