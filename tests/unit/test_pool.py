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


def use(pool: ModelPool, model_id: str) -> None:
    """A generation on the model, over at once."""
    pool.acquire(model_id)
    pool.release(model_id)


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
    use(pool, "a")
    use(pool, "c")  # 3 more fit beside a's 6
    use(pool, "a")  # a used last: c is the least recent
    use(pool, "b")  # 6 does not fit beside 9: c goes, then a
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
    use(pool, "a")
    use(pool, "b")
    assert pool.loaded() == ["b"] and log == ["load a", "close a", "load b"]
    used = pool.served["b"].last_used
    assert pool.unload_idle(now=used + 4.9) == [] and pool.loaded() == ["b"]
    assert pool.unload_idle(now=used + 5.0) == ["b"] and pool.loaded() == []
    assert pool.snapshot() == [{"id": "a", "loaded": False}, {"id": "b", "loaded": False}]


def test_a_model_in_use_stays_whatever_memory_or_idle_time_says():
    log: list[str] = []
    pool = ModelPool(
        [Sized("a", 1, log), Sized("b", 1, log)], max_loaded=1, keep_alive=0.0, available=lambda: 0
    )
    pool.acquire("a")  # a generation running on a
    use(pool, "b")  # b loads beside it: a is not let go while it generates
    assert log == ["load a", "load b"]
    assert pool.unload_idle(now=pool.served["a"].last_used + 60) == ["b"]
    assert pool.loaded() == ["a"]
    pool.release("a")
    assert pool.unload_idle(now=pool.served["a"].last_used) == ["a"]
