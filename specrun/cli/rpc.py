"""`specrun rpc-server`: lend this machine's devices to a specrun elsewhere (`--rpc`), with
ggml's own RPC server, until Ctrl-C or SIGTERM, which exit 0."""

from __future__ import annotations

import ipaddress

import typer

from specrun.cli.options import comma_list, note
from specrun.cli.serve import listen
from specrun.errors import OptionError, SpecrunError
from specrun.llama.rpc import DEFAULT_PORT, PROTOCOL, server_devices, start_server

WAIT_SECONDS = 0.5  # how often the main thread wakes, so that a signal is handled


def rpc_server(
    host: str = typer.Option(
        "127.0.0.1",
        "--host",
        help="IPv4 address to listen on; anything but loopback "
        "lets other machines in, with no authentication.",
    ),
    port: int = typer.Option(DEFAULT_PORT, "--port", min=1, max=65535, help="Port."),
    device: list[str] = typer.Option(
        [],
        "--device",
        help="A device to lend, by llama.cpp's name (CPU, CUDA0, "
        "...; repeatable). Default: every GPU, else the CPU.",
    ),
    threads: int | None = typer.Option(
        None,
        "--threads",
        min=1,
        help="CPU threads for the CPU device (default: one per physical core).",
    ),
) -> None:
    """Serve this machine's devices to `--rpc HOST:PORT` of run, chat, serve and bench elsewhere."""
    from specrun.system.cpus import physical_cores

    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        raise OptionError(
            f"--host must be an IPv4 address (ggml's RPC server listens on IPv4 only), got {host!r}"
        ) from None
    handles = server_devices([name for names in device for name in comma_list(names, "--device")])
    listen(
        host, port
    ).close()  # a port in use is one line here, not ggml's message after its banner
    if not address.is_loopback:
        note(
            f"warning: listening on {host}:{port}: the RPC protocol has no authentication, "
            "so anyone who reaches this port can use these devices and their memory; "
            "keep it on a trusted network"
        )
    server = start_server(host, port, handles, threads or physical_cores())
    note(f"RPC server on {host}:{port}, protocol {'.'.join(map(str, PROTOCOL))} (Ctrl-C stops)")
    try:
        while server.is_alive():
            server.join(WAIT_SECONDS)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the end a server is meant to have
        note("stopped")
        return
    raise SpecrunError(f"the RPC server on {host}:{port} stopped: ggml's message above says why")
