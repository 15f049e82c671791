"""A TCP proxy that delays every byte by a fixed one-way latency: a network between loopback
RPC servers and specrun, where the kernel has no netem (bench/results/rpc.txt).

    python bench/delay_proxy.py LISTEN_PORT TARGET_PORT DELAY_MS

Each direction of each connection is a reader that stamps what it receives and a writer
that sends it once the delay has passed, in order: the latency is added, the bandwidth
(loopback's) is not limited.
"""

from __future__ import annotations

import argparse
import queue
import socket
import threading
import time


def _pump(source: socket.socket, sink: socket.socket, delay: float) -> None:
    pending: queue.Queue[tuple[float, bytes]] = queue.Queue()

    def write() -> None:
        while True:
            due, data = pending.get()
            if not data:
                sink.shutdown(socket.SHUT_WR)
                return
            time.sleep(max(0.0, due - time.monotonic()))
            sink.sendall(data)

    threading.Thread(target=write, daemon=True).start()
    while True:
        try:
            data = source.recv(1 << 20)
        except OSError:
            data = b""
        pending.put((time.monotonic() + delay, data))
        if not data:
            return


def serve(listen_port: int, target_port: int, delay: float) -> None:
    listener = socket.create_server(("127.0.0.1", listen_port))
    while True:
        client, _ = listener.accept()
        server = socket.create_connection(("127.0.0.1", target_port))
        for sock in (client, server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_pump, args=(client, server, delay), daemon=True).start()
        threading.Thread(target=_pump, args=(server, client, delay), daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("listen_port", type=int, metavar="LISTEN_PORT", help="port to listen on")
    parser.add_argument(
        "target_port", type=int, metavar="TARGET_PORT", help="port each connection goes on to"
    )
    parser.add_argument(
        "delay_ms", type=float, metavar="DELAY_MS", help="one-way latency added each way, in ms"
    )
    args = parser.parse_args()
    serve(args.listen_port, args.target_port, args.delay_ms / 1000)


if __name__ == "__main__":
    main()
