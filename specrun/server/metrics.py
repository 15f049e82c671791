"""`/metrics`: the server's counters in Prometheus's text format, named as vLLM names them
where it has the figure (`vllm:` becomes `specrun:`), so a dashboard made for vLLM reads them.
Counted as each request ends, as /v1/stats totals them; the queue as it stands."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from specrun.server.worker import Worker

PREFIX = "specrun:"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MetricKind = Literal["counter", "gauge"]


@dataclass(frozen=True)
class Metric:
    name: str  # without the prefix, and for a counter without `_total`
    kind: MetricKind
    help: str
    samples: tuple[tuple[dict[str, str], int], ...]  # (labels, value): counts, all of them

    def lines(self) -> Iterable[str]:
        # The text format names a counter by its samples' name, `_total` and all.
        name = PREFIX + self.name + ("_total" if self.kind == "counter" else "")
        yield f"# HELP {name} {self.help}"
        yield f"# TYPE {name} {self.kind}"
        for labels, value in self.samples:
            shown = ",".join(f'{key}="{_escaped(text)}"' for key, text in labels.items())
            yield f"{name}{'{' + shown + '}' if shown else ''} {value!r}"


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _one(name: str, kind: MetricKind, help: str, value: int) -> Metric:
    return Metric(name, kind, help, (({}, value),))


def metrics(worker: Worker) -> list[Metric]:
    totals, speculation = worker.totals, worker.speculation
    running = len(worker.running)
    return [
        _one("num_requests_running", "gauge", "Requests generating now.", running),
        _one("num_requests_waiting", "gauge", "Requests in the queue.", len(worker.jobs) - running),
        _one(
            "num_slots", "gauge", "Generations the server runs at once (--parallel).", worker.slots
        ),
        Metric(
            "model_loaded",
            "gauge",
            "Whether a model the server answers for is in memory (1) or loads when named (0).",
            tuple(
                ({"model": str(model["id"])}, int(bool(model["loaded"])))
                for model in worker.pool.snapshot()
            ),
        ),
        Metric(
            "request_success",
            "counter",
            "Requests answered, by why their answer ended.",
            (
                ({"finished_reason": "stop"}, totals["stop"]),
                ({"finished_reason": "length"}, totals["length"]),
                ({"finished_reason": "abort"}, totals["cancelled"]),  # the client left
            ),
        ),
        _one("request_failure", "counter", "Requests that ended in an error.", totals["failed"]),
        _one(
            "request_rejected",
            "counter",
            "Requests refused with 503: the queue was full.",
            totals["rejected"],
        ),
        _one(
            "prompt_tokens",
            "counter",
            "Prompt tokens of the requests answered.",
            totals["prompt_tokens"],
        ),
        _one("generation_tokens", "counter", "Tokens generated.", totals["completion_tokens"]),
        _one("spec_decode_num_drafts", "counter", "Rounds that drafted.", speculation.drafts),
        _one(
            "spec_decode_num_draft_tokens", "counter", "Tokens drafted.", speculation.draft_tokens
        ),
        _one(
            "spec_decode_num_accepted_tokens",
            "counter",
            "Drafted tokens the target accepted.",
            speculation.accepted_tokens,
        ),
        Metric(
            "spec_decode_num_accepted_tokens_per_pos",
            "counter",
            "Drafted tokens the target accepted, by their position in the draft (0: first).",
            tuple(
                ({"position": str(position)}, accepted)
                for position, accepted in enumerate(speculation.accepted_per_position)
            ),
        ),
    ]


def exposition(worker: Worker) -> str:
    """The whole text a scrape reads."""
    return "".join(line + "\n" for metric in metrics(worker) for line in metric.lines())
