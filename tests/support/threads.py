"""Jobs in threads of their own, all at once, each joined with a deadline."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

JOIN_SECONDS = 300


def in_threads(jobs: Sequence[Callable[[], Any]]) -> list[Any]:
    """Each job in a thread of its own, all at once; their results in order."""
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = jobs[i]()
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=JOIN_SECONDS)
    assert not errors, errors
    assert not any(thread.is_alive() for thread in threads), "a job ran past its deadline"
    return results
