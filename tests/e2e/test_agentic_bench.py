"""bench/agentic.py: its episode file parses, and an episode runs against `specrun serve`, each
request carrying the earlier turns and the server's own answers where it keeps a history."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from bench.agentic import EPISODES, Episode, chat_renderer, load_episodes, run_episode
from specrun.errors import SpecrunError
from tests.support.processes import DEADLINE
from tests.support.server import Server


def test_the_episode_file_holds_the_four_kinds_of_agent_work() -> None:
    episodes = load_episodes(EPISODES)
    assert {e.kind for e in episodes} == {"extraction", "edit", "tools", "template"}
    assert all(len(e.turns) >= 4 and e.system for e in episodes)
    assert len({e.name for e in episodes}) == len(episodes)


def test_a_line_that_is_not_an_episode_is_named(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text('{"name": "x", "kind": "tools", "history": true, "system": "s"}\n')
    with pytest.raises(
        SpecrunError, match=r"episodes.jsonl:1: not an episode \(KeyError: 'turns'\)"
    ):
        load_episodes(path)


def test_an_episode_runs_with_its_answers_fed_back(tiny_target: Path) -> None:
    episode = next(e for e in load_episodes(EPISODES) if e.history)
    short = Episode(episode.name, episode.kind, True, episode.system, episode.turns[:3])
    render = chat_renderer(tiny_target)
    asked: list[list[tuple[str, str]]] = []

    def recorded(turns: list[tuple[str, str]]) -> str:
        asked.append(turns)
        return render(turns)

    server = Server("-t", str(tiny_target), "--draft", "lookup", "--parallel", "1")
    try:
        with httpx.Client(timeout=DEADLINE) as client:
            answers = run_episode(client, server.url, short, recorded, tokens=8)
    finally:
        server.stop()
    assert len(answers) == 3
    assert all(a.tokens > 0 and a.wall > 0 and a.decode > 0 for a in answers)
    # Each request: the system message, every earlier turn and answer, then the next turn.
    assert asked[0] == [("system", episode.system), ("user", episode.turns[0])]
    assert asked[2] == [
        ("system", episode.system),
        ("user", episode.turns[0]),
        ("assistant", answers[0].text),
        ("user", episode.turns[1]),
        ("assistant", answers[1].text),
        ("user", episode.turns[2]),
    ]
