"""`specrun serve`: the model options of `run` and `chat`, an address, and the server
(`specrun.server`) on it until Ctrl-C or SIGTERM, which end the running generation and exit 0."""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import socket
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from specrun.cli.helptext import MODEL_PANEL, SERVER_PANEL
from specrun.cli.options import (
    DRAFTING,
    LOAD,
    SAMPLING,
    SERVED_MODELS,
    SUFFIX_DRAFTS,
    ModelChoice,
    ModelRequest,
    OptionGroup,
    load_engine,
    load_notes,
    note,
    takes,
)
from specrun.context_overflow import Overflow
from specrun.core.sampling import SamplingParams
from specrun.errors import OptionError, SpecrunError
from specrun.llama.prompt_cache import DEFAULT_CACHE_MIB, PromptCache
from specrun.options import DraftOptions, LoadOptions
from specrun.system.formatting import format_size

if TYPE_CHECKING:
    from specrun.engine import Engine
    from specrun.llama.embedding import Embedder
    from specrun.server.pool import Served

API_KEY_ENV = "SPECRUN_API_KEY"
DEFAULT_SLOTS = 4  # llama-server's default too
MAX_SLOTS = 64
ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s?#]+", re.IGNORECASE)  # a page's Origin header


@dataclass(frozen=True)
class ServerOptions:
    """Where the server listens, who may call it, and how long a client may take to ask."""

    host: str
    port: int
    api_keys: tuple[str, ...]  # each its own tenant; none: no key needed
    allowed_hosts: tuple[str, ...]  # Host names answered besides localhost, --host and IPs
    cors: tuple[str, ...]  # origins whose pages may call the API
    read_timeout: float
    alias: str | None = None  # the name the command line's model is served by


@dataclass(frozen=True)
class PoolOptions:
    """The models besides --target that requests may name, and how long they stay loaded."""

    more_models: tuple[str, ...]  # TARGET[+DRAFT] each
    keep_alive: float | None  # None: for as long as the server runs
    max_models: int  # 0: as many as memory holds
    embedding_models: tuple[str, ...] = ()  # those that answer /v1/embeddings


@dataclass(frozen=True)
class SlotOptions:
    """Generations at once, and how many more may wait."""

    parallel: int | None  # None: `default_slots`
    queue: int
    cache_ram: int = DEFAULT_CACHE_MIB  # MiB of prompts kept in host memory; 0: none
    context_overflow: Overflow = "truncate"


def _server(
    host: str,
    port: int,
    api_keys: list[str],
    allowed_hosts: list[str],
    cors: list[str],
    read_timeout: float,
    alias: str | None,
) -> ServerOptions:
    # The variable read here, whole: click would split a repeatable option's value at spaces,
    # and read an empty one as unset; an empty key is a mistake either way, not "no key".
    if not api_keys and API_KEY_ENV in os.environ:
        api_keys = [os.environ[API_KEY_ENV]]
    if any(not key.strip() for key in api_keys):
        raise OptionError(f"--api-key (or ${API_KEY_ENV}) is empty")
    if not read_timeout > 0:
        raise OptionError(f"--read-timeout must be more than 0 seconds, got {read_timeout:g}")
    if any(not name.strip() for name in allowed_hosts):
        raise OptionError("--allowed-host is empty")
    for origin in cors:
        if origin != "*" and not ORIGIN.fullmatch(origin):
            raise OptionError(
                f"--cors takes an origin, a scheme and a host with its port if any "
                f"(http://localhost:3000), or *; got {origin!r}"
            )
    if alias is not None and not alias.strip():
        raise OptionError("--alias is empty")
    keys = tuple(dict.fromkeys(api_keys))  # a key given twice is one tenant
    return ServerOptions(
        host, port, keys, tuple(allowed_hosts), tuple(cors), read_timeout, alias and alias.strip()
    )


def _pool(
    more_models: list[str], keep_alive: float | None, max_models: int, embedding_models: list[str]
) -> PoolOptions:
    if keep_alive is not None and not keep_alive >= 0:
        raise OptionError(f"--keep-alive must be 0 seconds or more, got {keep_alive:g}")
    return PoolOptions(tuple(more_models), keep_alive, max_models, tuple(embedding_models))


SERVER = OptionGroup(
    "server",
    {
        "host": (
            str,
            typer.Option(
                "127.0.0.1",
                "--host",
                help="Address to listen on; anything but loopback lets other machines in.",
            ),
        ),
        "port": (
            int,
            typer.Option(
                8080, "--port", min=0, max=65535, help="Port (0: a free one, printed at start)."
            ),
        ),
        "api_keys": (
            list[str],
            typer.Option(
                [],
                "--api-key",
                metavar="KEY",
                help="Require `Authorization: Bearer KEY` (all but /health); repeatable, each key"
                f" a tenant of its own (suffix drafts never use one's answers for another's)."
                f" Without it: ${API_KEY_ENV}, one key.",
            ),
        ),
        "allowed_hosts": (
            list[str],
            typer.Option(
                [],
                "--allowed-host",
                metavar="NAME",
                help="Also answer requests for this Host name (repeatable; .example.com: it and"
                " its subdomains; *: any). Without it: localhost, --host and IP addresses.",
            ),
        ),
        "cors": (
            list[str],
            typer.Option(
                [],
                "--cors",
                metavar="ORIGIN",
                help="Let web pages from this origin call the API (repeatable; e.g. "
                "http://localhost:3000; *: any). Off by default.",
            ),
        ),
        "read_timeout": (
            float,
            typer.Option(
                60.0,
                "--read-timeout",
                metavar="SECONDS",
                help="Most time a client may take to send a request's headers, and again its "
                "body (408).",
            ),
        ),
        "alias": (
            str | None,
            typer.Option(
                None,
                "--alias",
                "-a",
                metavar="NAME",
                help="Serve the model by this name (/v1/models' id, the name requests give), as "
                "llama-server's --alias; its file's name still answers too. Default: the "
                "file's name without .gguf.",
            ),
        ),
    },
    _server,
    SERVER_PANEL,
)
POOL = OptionGroup(
    "pool",
    {
        "more_models": (
            list[str],
            typer.Option(
                [],
                "--model",
                "-m",
                metavar="TARGET[+DRAFT]",
                rich_help_panel=MODEL_PANEL,
                help="Also answer requests that name this model (its file name without .gguf), "
                "loading it on first use (repeatable; TARGET and DRAFT as --target and --draft "
                "take them). Without --target, the first is the model loaded at the start, as "
                "llama-server's -m.",
            ),
        ),
        "keep_alive": (
            float | None,
            typer.Option(
                None,
                "--keep-alive",
                metavar="SECONDS",
                help="Unload a model after this long without a request (default: never); it "
                "loads again when one comes.",
            ),
        ),
        "max_models": (
            int,
            typer.Option(
                0,
                "--max-models",
                min=0,
                help="Most models loaded at once (0: as many as memory holds); the least "
                "recently used goes first.",
            ),
        ),
        "embedding_models": (
            list[str],
            typer.Option(
                [],
                "--embedding-model",
                metavar="MODEL",
                help="Answer /v1/embeddings requests that name this model (its file name "
                "without .gguf) with it, pooled as its GGUF declares (an embedding model: "
                "nomic-embed, bge, Qwen3-Embedding), loaded on first use; repeatable.",
            ),
        ),
    },
    _pool,
    SERVER_PANEL,
)
SLOTS = OptionGroup(
    "slots",
    {
        "parallel": (
            int | None,
            typer.Option(
                None,
                "--parallel",
                "-np",
                min=1,
                max=MAX_SLOTS,
                help=f"Generations at once (slots), their rounds decoded in one batch; each has "
                f"--ctx tokens of its own. Default: {DEFAULT_SLOTS} (as llama-server), fewer "
                "where their KV caches would not fit in free memory. Each slot drafts with a "
                "head of its own; with --reproducible each decodes apart.",
            ),
        ),
        "queue": (
            int,
            typer.Option(
                64,
                "--queue",
                min=0,
                help="Requests that may wait while every slot generates; more get HTTP 503.",
            ),
        ),
        "cache_ram": (
            int,
            typer.Option(
                DEFAULT_CACHE_MIB,
                "--cache-ram",
                "-cram",
                min=0,
                metavar="MIB",
                help="Host memory for prompts that slots drop (as llama-server's): a conversation "
                "that comes back restores its prompt instead of evaluating it again. A prompt "
                "takes what its KV cache cells take; the least recently used go first. 0: none.",
            ),
        ),
        "context_overflow": (
            Overflow,
            typer.Option(
                "truncate",
                "--context-overflow",
                help="Chat messages longer than the context: truncate drops the oldest exchanges "
                "(system messages and the last message stay; the answer's `specrun` figures "
                "count them in dropped_messages); error answers 400, as llama-server.",
            ),
        ),
    },
    SlotOptions,
    SERVER_PANEL,
)


@takes(SERVED_MODELS, DRAFTING, SAMPLING, LOAD, SERVER, POOL, SLOTS)
def serve(
    *,
    server: ServerOptions,
    pool: PoolOptions,
    slots: SlotOptions,
    sampling: SamplingParams,
    drafting: DraftOptions,
    load: LoadOptions,
    models: ModelRequest,
) -> None:
    """Serve the model (and each --model, loaded when a request names it) over an
    OpenAI-compatible HTTP API; the sampling options are the defaults of requests."""
    # here: `specrun run` need not import the HTTP stack
    from specrun.server.app import serve as run_server
    from specrun.server.pool import ModelPool
    from specrun.server.requests import AllowedHosts

    # Bound before the models load: a port in use is one line now, not after a long load.
    with listen(server.host, server.port) as listener:
        address, port = listener.getsockname()[:2]
        if not ipaddress.ip_address(address).is_loopback:
            note(
                f"warning: listening on {server.host}, reachable from other machines"
                + ("" if server.api_keys else f", with no API key (--api-key or ${API_KEY_ENV})")
            )
        models, more_models = _first_model(models, pool.more_models)
        # A server's requests repeat earlier answers (an agent's): suffix drafts, which match
        # the request's own text as prompt lookup does, and those answers besides.
        choice = models.resolve(free=SUFFIX_DRAFTS)
        # Every name checked before anything loads; a request names a model by its file's
        # stem, or as the command line did (an alias).
        named = [(models.target or "", choice), *(_choice(s, models) for s in more_models)]
        stems = {resolved.target.stem for _, resolved in named} | {server.alias or ""}
        embedding = _embedding(pool.embedding_models, models, load, stems)
        parallel = _parallel(slots.parallel, [resolved for _, resolved in named], load)
        load = replace(load, parallel=parallel)
        engine = load_engine(choice, load, params=sampling, drafting=drafting)
        model_pool = ModelPool(
            _served(named, engine, choice, load, sampling, drafting, server.alias),
            embedding=embedding,
            keep_alive=pool.keep_alive,
            max_loaded=pool.max_models,
            prompt_cache=PromptCache.of_mib(slots.cache_ram),
            overflow=slots.context_overflow,
        )
        try:
            load_notes(engine.target, load)
            url = f"http://{f'[{server.host}]' if ':' in server.host else server.host}:{port}/v1"
            run_server(
                model_pool,
                listener,
                defaults=sampling,
                api_keys=server.api_keys,
                hosts=AllowedHosts.of(server.host, server.allowed_hosts),
                cors=server.cors,
                queue=slots.queue,
                slots=engine.parallel,
                read_timeout=server.read_timeout,
                ready=lambda: note(
                    f"serving {server.alias or choice.target.stem} at {url} (Ctrl-C stops)"
                ),
            )
        finally:
            model_pool.close()
    note("stopped")


def _served(
    named: list[tuple[str, ModelChoice]],
    engine: Engine,
    choice: ModelChoice,
    load: LoadOptions,
    sampling: SamplingParams,
    drafting: DraftOptions,
    served_as: str | None = None,
) -> list[Served[Engine]]:
    """Each model the server answers for, by its file's stem; the command line's, loaded, by
    `served_as` (--alias) where given, its stem answering too."""
    from specrun.server.pool import Served

    served: list[Served[Engine]] = []
    taken: set[str] = set()  # the ids and file stems so far
    for alias, resolved in named:
        first = resolved is choice
        name = served_as if first and served_as else resolved.target.stem
        if taken & {name, resolved.target.stem}:
            raise OptionError(f"--model {name} is served already")
        taken |= {name, resolved.target.stem}
        served.append(
            Served(
                name,
                functools.partial(load_engine, resolved, load, params=sampling, drafting=drafting),
                files=(resolved.target, *(d for d in resolved.drafts if isinstance(d, Path))),
                aliases=(alias, resolved.target.stem) if name != resolved.target.stem else (alias,),
                options=load,
                engine=engine if first else None,
            )
        )
    return served


def _embedding(
    specs: tuple[str, ...], given: ModelRequest, load: LoadOptions, served: set[str]
) -> list[Served[Embedder]]:
    """Each --embedding-model, resolved as --target is and checked, before anything loads, to
    declare a pooling that makes one vector of an input (a causal LM declares none), by its
    file's stem (none of `served`, the generation models')."""
    from specrun.llama.embedding import CannotEmbed, Embedder, declared_pooling
    from specrun.llama.model import DEFAULT_CTX
    from specrun.server.pool import Served

    embedding: list[Served[Embedder]] = []
    taken = set(served)
    for spec in specs:
        path = ModelRequest(spec, "none", given.catalog).resolve().target
        try:
            declared_pooling(path)
        except CannotEmbed as error:
            raise OptionError(f"--embedding-model {spec}: {error}") from None
        if path.stem in taken:
            raise OptionError(f"--embedding-model {path.stem} is served already")
        taken.add(path.stem)
        options = replace(load, parallel=1)  # one context, whatever the slots
        embedding.append(
            Served(
                path.stem,
                functools.partial(
                    Embedder,
                    path,
                    n_ctx=load.n_ctx or DEFAULT_CTX,  # an input's most tokens, and a batch's
                    gpu_layers=load.gpu_layers,
                    threads=load.threads,
                    verbose=load.verbose,
                ),
                files=(path,),
                aliases=(spec,),
                options=options,
            )
        )
    return embedding


def _parallel(asked: int | None, choices: list[ModelChoice], load: LoadOptions) -> int:
    """--parallel as given, else its default, with the line that says why."""
    if asked is not None:
        return asked
    slots, why = default_slots(choices, load)
    note(why)
    return slots


def default_slots(choices: list[ModelChoice], load: LoadOptions) -> tuple[int, str]:
    """--parallel's default, and the line that says why: DEFAULT_SLOTS, fewer where the
    largest model's KV caches for that many would not fit in the memory free now (GPUs' and
    the system's)."""
    from specrun.llama.devices import gpu_free_bytes, system_memory_available
    from specrun.llama.footprint import estimate
    from specrun.llama.model import DEFAULT_CTX

    n_ctx = load.n_ctx or DEFAULT_CTX
    try:
        needs = [
            [
                estimate(path, n_ctx=n_ctx)
                for path in (c.target, *c.drafts)
                if isinstance(path, Path)
            ]
            for c in choices
        ]
    except (OSError, ValueError, KeyError):  # not a GGUF the estimate reads: llama.cpp will say
        return DEFAULT_SLOTS, f"{DEFAULT_SLOTS} slots (--parallel)"
    available = system_memory_available() + gpu_free_bytes()

    def largest(slots: int) -> int:
        return max(sum(f.for_sequences(slots).total for f in files) for files in needs)

    slots = next((n for n in range(DEFAULT_SLOTS, 0, -1) if largest(n) <= available), 1)
    return slots, (
        f"{slots} slot{'s' if slots > 1 else ''} (--parallel) of {n_ctx} tokens: "
        f"{format_size(largest(slots))} with the KV caches, {format_size(available)} free"
    )


def _model_spec(spec: str) -> tuple[str, str | None]:
    """--model TARGET[+DRAFT]: the target and the draft, if named."""
    target, plus, draft = (part.strip() for part in spec.partition("+"))
    if not target or (plus and not draft):
        raise OptionError(f"--model takes TARGET or TARGET+DRAFT, got {spec!r}")
    return target, draft or None


def _first_model(given: ModelRequest, more: tuple[str, ...]) -> tuple[ModelRequest, list[str]]:
    """Without --target, the first --model is the model served from the start (llama-server's
    -m), its DRAFT as --draft; the others load on first use."""
    if given.target is not None or not more:
        return given, list(more)
    target, draft = _model_spec(more[0])
    if draft is not None and given.draft is not None:
        raise OptionError(f"--model {more[0]} and --draft {given.draft} both name its draft")
    return replace(given, target=target, draft=draft or given.draft), list(more[1:])


def _choice(spec: str, given: ModelRequest) -> tuple[str, ModelChoice]:
    """--model TARGET[+DRAFT]: TARGET as given, and the pair resolved as --target and
    --draft are (the catalog too)."""
    target, draft = _model_spec(spec)
    return target, ModelRequest(target, draft, given.catalog).resolve(free=SUFFIX_DRAFTS)


def listen(host: str, port: int) -> socket.socket:
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as error:
        raise SpecrunError(f"cannot listen on {host}: {error.strerror}") from None
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(
            socket.SOL_SOCKET, socket.SO_REUSEADDR, 1
        )  # a restart need not wait out TIME_WAIT
        listener.bind((host, port))
        listener.listen()
    except OSError as error:
        listener.close()
        raise SpecrunError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    return listener
