"""The server's models on demand, without loading any: what is let go for the next one to
fit, in memory or in number, and after how long idle."""

from __future__ import annotations

from specrun.server.pool import ModelPool, Served


class Loaded:
    """What a model's engine is to the pool: something to close."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log
        log.append(f"load {name}")

    def close(self) -> None:
        self.log.append(f"close {self.name}")


class Sized(Served):
    def __init__(self, name: str, size: int, log: list[str]) -> None:
        super().__init__(name, lambda: Loaded(name, log))  # type: ignore[arg-type, return-value]
        self.size = size

    def bytes_needed(self) -> int:
        return self.size


def test_the_least_recently_used_goes_when_the_next_would_not_fit():
    log: list[str] = []
    free = {"bytes": 10}
    models = [Sized("a", 6, log), Sized("b", 6, log), Sized("c", 3, log)]

    def available() -> int:  # what loading took is no longer free
        loaded = sum(m.size for m in models if m.engine is not None)
        return free["bytes"] - loaded

    pool = ModelPool(models, available=available)
    pool.engine("a")
    pool.engine("c")  # 3 more fit beside a's 6
    pool.engine("a")  # a used last: c is the least recent
    pool.engine("b")  # 6 does not fit beside 9: c goes, then a
    assert log == ["load a", "load c", "close c", "close a", "load b"]
    assert pool.loaded() == ["b"]


def test_at_most_max_loaded_and_the_idle_go_after_keep_alive():
    log: list[str] = []
    pool = ModelPool(
        [Sized("a", 1, log), Sized("b", 1, log)],
        max_loaded=1,
        keep_alive=5.0,
        available=lambda: 100,
    )
    pool.engine("a")
    pool.engine("b")
    assert pool.loaded() == ["b"] and log == ["load a", "close a", "load b"]
    used = pool.served["b"].last_used
    assert pool.unload_idle(now=used + 4.9) == [] and pool.loaded() == ["b"]
    assert pool.unload_idle(now=used + 5.0) == ["b"] and pool.loaded() == []
    assert pool.snapshot() == [{"id": "a", "loaded": False}, {"id": "b", "loaded": False}]
