"""Where the layers go, decided before anything loads: the draft wholly on the GPU first,
then as many target layers as the GPUs' free memory holds, the rest on the CPU.

The devices of RPC servers (`--rpc`) count as GPUs for the target only: the draft stays
on this machine, where a round does not wait on the network γ times.

The draft runs γ times a round, so a draft on the CPU seldom pays: it gets the GPU
first, whole. The target's layers follow llama.cpp's offload order (n_gpu_layers = N
puts the last N repeating layers on the GPU, and the output layer too when
N = n_layer + 1) and, over several GPUs, llama.cpp's layer split in proportion to
what each GPU has free. Each GPU keeps `MARGIN` free, as llama.cpp's own fitter does.
A GPU whose memory is the system's (Apple silicon's Metal, an integrated GPU) holds its
share out of the same memory as the CPU's: the whole must fit in the system's.

The KV cache counts at its types and the compute buffer with or without flash attention
(`Tuning`). Without a GPU, what must stay in memory must fit the system's: the KV caches
and compute buffers, and the weights where they are read in or locked (`--no-mmap`,
`--mlock`); mapped weights are pages of the file the system may drop and read again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, TypedDict

from specrun.errors import SpecrunError
from specrun.llama.devices import (
    accelerator_name,
    gpu_devices,
    shares_host_memory,
    system_memory_available,
)
from specrun.llama.footprint import Footprint, estimate
from specrun.llama.gguf import GGUFFileError
from specrun.llama.invariance import Invariance, InvarianceMode
from specrun.llama.tuning import Tuning

GIB = 2**30
MARGIN = 1 * GIB  # left free on each GPU: other programs, driver, fragmentation


class PlacementError(SpecrunError):
    """The models cannot fit the memory there is; said before anything loads."""


@dataclass(frozen=True)
class Gpu:
    name: str  # llama.cpp's device name, e.g. "CUDA0", "RPC0"
    free_bytes: int
    total_bytes: int
    endpoint: str = ""  # HOST:PORT of the RPC server it belongs to; "" on this machine
    shares_host_memory: bool = False  # its memory is the system's (unified memory)

    @property
    def label(self) -> str:
        return f"{self.name}@{self.endpoint}" if self.endpoint else self.name


@dataclass(frozen=True)
class LayerPlan:
    target_layers: int  # n_gpu_layers for the target: 0..n_layer+1
    draft_layers: int  # n_gpu_layers for the draft
    # The target's share per GPU (llama.cpp's tensor_split), None for one GPU.
    split: tuple[float, ...] | None
    # With several local GPUs: the one (by index among them) that holds the whole draft.
    draft_gpu: int | None
    gpu_bytes: int  # estimated bytes the plan puts on the GPUs
    cpu_bytes: int  # estimated bytes left in system memory
    line: str  # what was chosen, in one line


def gigabytes(n: int) -> str:
    return f"{n / 1e9:.1f}"


def gpu_bytes(model: Footprint, layers: int) -> int:
    """What n_gpu_layers = `layers` puts on the GPU: the last layers, their KV, the output
    layer past n_layer, and the compute buffer once anything is offloaded."""
    offloaded = min(layers, model.n_layer)
    weights = sum(model.layer_weights[model.n_layer - offloaded :])
    output = model.output_weights if layers > model.n_layer else 0
    return weights + offloaded * model.kv_per_layer + output + (model.compute if layers else 0)


def cpu_bytes(model: Footprint, layers: int) -> int:
    """What n_gpu_layers = `layers` leaves in system memory: the input layer, the first layers
    and their KV, and while the output layer stays, it and a compute buffer for the CPU's share."""
    kept = model.n_layer - min(layers, model.n_layer)
    rest = model.output_weights + model.compute if layers <= model.n_layer else 0
    return model.input_weights + sum(model.layer_weights[:kept]) + kept * model.kv_per_layer + rest


def all_layers(model: Footprint) -> int:
    return model.n_layer + 1


def place_layers(
    target: Footprint, draft: Footprint | None, gpus: list[Gpu], cpu_free: int, margin: int = MARGIN
) -> LayerPlan:
    """The placement rule; raises PlacementError with the numbers when no placement works."""
    budgets = {gpu.name: max(0, gpu.free_bytes - margin) for gpu in gpus}
    draft_layers = 0
    local = [gpu for gpu in gpus if not gpu.endpoint]
    main = max(local, key=lambda g: g.free_bytes) if local else None
    if draft is not None and main is not None:
        need = gpu_bytes(draft, all_layers(draft))
        if need > budgets[main.name]:
            raise PlacementError(
                f"the draft {draft.name} needs {gigabytes(need)} GB on the GPU and {main.name} has "
                f"{gigabytes(main.free_bytes)} GB free ({gigabytes(margin)} GB kept free): "
                "use a smaller draft, or run the draft on the CPU with `draft_gpu_layers` 0"
            )
        budgets[main.name] -= need
        draft_layers = all_layers(draft)
    room = sum(budgets.values())
    target_layers = 0
    while target_layers < all_layers(target) and gpu_bytes(target, target_layers + 1) <= room:
        target_layers += 1
    on_cpu = cpu_bytes(target, target_layers) + (
        cpu_bytes(draft, draft_layers) if draft is not None else 0
    )
    if on_cpu > cpu_free:
        raise PlacementError(
            f"{target.name} needs {gigabytes(on_cpu)} GB of system memory beyond the GPUs and "
            f"{gigabytes(cpu_free)} GB is available: use a smaller model or a smaller `n_ctx`"
        )
    # The target's layers spread over the GPUs as their budgets do (the split below).
    shared = sum(budgets[g.name] for g in gpus if g.shares_host_memory) / (room or 1)
    on_shared = int(gpu_bytes(target, target_layers) * shared)
    if draft is not None and main is not None and main.shares_host_memory:
        on_shared += gpu_bytes(draft, draft_layers)
    if on_shared and on_cpu + on_shared > cpu_free:
        raise PlacementError(
            f"{target.name} needs {gigabytes(on_cpu + on_shared)} GB of memory, which the GPU "
            f"shares with the system, and {gigabytes(cpu_free)} GB is available: "
            "use a smaller model or a smaller `n_ctx`"
        )
    split = _split(budgets) if len(gpus) > 1 and target_layers else None
    used = gpu_bytes(target, target_layers) + (
        gpu_bytes(draft, draft_layers) if draft is not None else 0
    )
    draft_gpu = (
        local.index(main) if draft is not None and main is not None and len(local) > 1 else None
    )
    return LayerPlan(
        target_layers,
        draft_layers,
        split,
        draft_gpu,
        used,
        on_cpu,
        describe(target, draft, target_layers, draft_layers, gpus, main, split),
    )


def _split(budgets: dict[str, int]) -> tuple[float, ...]:
    total = sum(budgets.values()) or 1
    return tuple(budget / total for budget in budgets.values())


def describe(
    target: Footprint,
    draft: Footprint | None,
    target_layers: int,
    draft_layers: int,
    gpus: list[Gpu],
    main: Gpu | None,
    split: tuple[float, ...] | None,
) -> str:
    """e.g.
    `target: 52/80 layers on CUDA0 (23.1 of 24.0 GB free), 28 on CPU; draft: 16/16 on CUDA0`;
    a remote device shows its server, `RPC0@10.0.0.2:50052`."""
    if not gpus:
        return "no GPU: everything runs on the CPU"
    where = " + ".join(gpu.label for gpu in gpus)
    free = ", ".join(
        ("" if len(gpus) == 1 else f"{gpu.name}: ")
        + f"{gigabytes(gpu.free_bytes)} of {gigabytes(gpu.total_bytes)} GB free"
        for gpu in gpus
    )
    layers = min(target_layers, target.n_layer)
    text = f"target: {layers}/{target.n_layer} layers on {where} ({free})"
    if layers < target.n_layer:
        text += f", {target.n_layer - layers} on CPU"
    if split:
        text += " split " + ":".join(f"{share:.2f}" for share in split)
    if draft is not None:
        text += (
            f"; draft: {min(draft_layers, draft.n_layer)}/{draft.n_layer} on {main.name}"
            if main
            else "; draft: on this machine's CPU"
        )
    return text


def gpus_now() -> list[Gpu]:
    return [
        Gpu(d.name, d.free_bytes, d.total_bytes, shares_host_memory=shares_host_memory(d))
        for d in gpu_devices()
    ]


def plan_layers(
    target: Path,
    draft: Path | None,
    n_ctx: int,
    remote: list[Gpu] | None = None,
    sequences: int = 1,
    *,
    tuning: Tuning = Tuning(),
    draft_tuning: Tuning | None = None,
) -> LayerPlan | None:
    """The fit on the `remote` devices and this machine's GPUs now, in that order (llama.cpp's:
    the first layers remote, the output layer here), with a KV cache of `n_ctx` for each of
    `sequences` at the `tuning`'s types (the draft's: `draft_tuning`, else the target's);
    None where there is no GPU at all, once the system's memory holds what it must."""
    gpus = (remote or []) + gpus_now()
    cpu_free = system_memory_available()
    try:
        target_model = estimate(target, n_ctx=n_ctx, tuning=tuning).for_sequences(sequences)
        draft_model = (
            estimate(draft, n_ctx=n_ctx, tuning=draft_tuning or tuning).for_sequences(sequences)
            if draft
            else None
        )
    except (GGUFFileError, KeyError, StopIteration):
        if gpus:
            raise
        return None  # not a GGUF the estimate reads: the load says what is wrong with it
    if not gpus:
        check_system_memory(target_model, draft_model, cpu_free, tuning)
        return None
    return place_layers(target_model, draft_model, gpus, cpu_free)


def resident_bytes(model: Footprint, tuning: Tuning) -> int:
    """What a model on the CPU keeps in memory: its KV cache and compute buffer, and its
    weights where they are read in or locked rather than mapped."""
    weights = model.weights if tuning.resident_weights else 0
    return weights + model.n_layer * model.kv_per_layer + model.compute


def check_system_memory(
    target: Footprint, draft: Footprint | None, cpu_free: int, tuning: Tuning
) -> None:
    """The rule without a GPU: what must stay in memory fits the memory available."""
    need = resident_bytes(target, tuning) + (resident_bytes(draft, tuning) if draft else 0)
    if need > cpu_free:
        kv = target.n_layer * target.kv_per_layer + (
            draft.n_layer * draft.kv_per_layer if draft else 0
        )
        raise PlacementError(
            f"{target.name} needs {gigabytes(need)} GB of system memory, its KV cache "
            f"{gigabytes(kv)} GB of it, and {gigabytes(cpu_free)} GB is available: use a "
            "smaller `n_ctx`, a quantized KV cache (`cache_type_k`, `cache_type_v`) or a "
            "smaller model"
        )


class Placed(Protocol):
    """What `Placement.of` reads of a loaded model."""

    n_layer: int
    invariance: Invariance | None
    samples_on_device: bool

    @property
    def offloaded_layers(self) -> int: ...


class _PlacementFields(TypedDict):
    device: str
    gpu_layers: list[str]


class PlacementRecord(_PlacementFields, total=False):
    """`Placement.as_dict()`: the fields of `run --json` and bench's `placement` that say
    where the models ran; the optional ones only where they apply."""

    reproducible: InvarianceMode
    backend_sampling: bool
    rpc: list[str]
    fit: str
    gpu_bytes_estimated: int
    gpu_bytes_measured: int | None


@dataclass(frozen=True)
class Placement:
    """Where loaded models run, for every front end and `run --json`."""

    device: str  # "CPU", an accelerator's name, "... + RPC" with remote devices
    gpu_layers: tuple[str, ...]  # "offloaded/total" for each model, the target first
    reproducible: InvarianceMode | None = None  # the target's, under `reproducible`
    backend_sampling: bool = False  # the target's device chooses each row's candidates
    rpc: tuple[str, ...] = ()  # the RPC servers' HOST:PORT
    plan: LayerPlan | None = None  # the layers placed by free memory, where there were GPUs
    gpu_bytes_measured: int | None = None  # what loading took on the GPUs, beside the plan's

    @classmethod
    def of(cls, models: Sequence[Placed]) -> Placement:
        # With no layer offloaded the work runs on the CPU whatever llama.cpp was built with.
        on_gpu = any(m.offloaded_layers for m in models)
        invariance = models[0].invariance  # the target's: only its logits decide the output
        return cls(
            device=accelerator_name() if on_gpu else "CPU",
            gpu_layers=tuple(f"{m.offloaded_layers}/{m.n_layer}" for m in models),
            reproducible=invariance.mode if invariance is not None else None,
            backend_sampling=models[0].samples_on_device,
        )

    def with_rpc(self, servers: Sequence[str]) -> Placement:
        return replace(self, device=f"{self.device} + RPC", rpc=tuple(servers))

    def text(self) -> str:
        """The device and layers in words, e.g. "CPU, GPU layers 0/30 + 0/30"."""
        sampling = ", candidates chosen on the device" if self.backend_sampling else ""
        return f"{self.device}, GPU layers {' + '.join(self.gpu_layers)}{sampling}"

    def as_dict(self) -> PlacementRecord:
        """The JSON record's fields: only those that apply."""
        record: PlacementRecord = {"device": self.device, "gpu_layers": list(self.gpu_layers)}
        if self.reproducible is not None:
            record["reproducible"] = self.reproducible
        if self.backend_sampling:
            record["backend_sampling"] = True
        if self.rpc:
            record["rpc"] = list(self.rpc)
        if self.plan is not None:
            record["fit"] = self.plan.line
            record["gpu_bytes_estimated"] = self.plan.gpu_bytes
            record["gpu_bytes_measured"] = self.gpu_bytes_measured
        return record
