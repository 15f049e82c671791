"""A small Hugging Face Hub on loopback: the endpoints huggingface_hub's downloads use.

    GET  /api/models/{repo}/tree/{revision}    the file listing (sizes, LFS sha256), in pages
                                               if `page_size` is set
    HEAD /{repo}/resolve/{revision}/{file}     ETag (the LFS sha256), X-Repo-Commit, size
    GET  /{repo}/resolve/{revision}/{file}     the bytes; Range requests answered with 206

Faults are set per test: an HTTP error for a path, a connection cut after some bytes, a
listing or a body that differs from the file the Hub's hash describes, an answer that is
not the Hub's (a captive portal's page), or no answer at all.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SILENT_SECONDS = 300  # a silent fault answers nothing for this long: past every client deadline
COMMIT = "feedfacefeedfacefeedfacefeedfacefeedface"


@dataclass
class Fault:
    status: int | None = None  # answer with this status (and `error_code` as X-Error-Code)
    error_code: str | None = None
    cut_after: int | None = (
        None  # GET: send the body up to this byte of the file, then close the connection
    )
    times: int = 1 << 30  # how many requests the fault applies to
    then: Callable[[], None] | None = None  # called after the answer (or the cut)
    body: bytes | None = None  # with `status`: this body, as `content_type`, not a JSON refusal
    content_type: str = "text/html; charset=utf-8"
    silent: bool = False  # take the request and never answer (until the server stops)


@dataclass
class HubServer:
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)  # repo -> path -> content
    faults: dict[str, Fault] = field(default_factory=dict)  # a request path's prefix -> fault
    served: dict[str, bytes] = field(
        default_factory=dict
    )  # "repo/path" -> body sent instead of the file
    listed_sizes: dict[str, int] = field(
        default_factory=dict
    )  # "repo/path" -> size the listing claims
    log: list[str] = field(default_factory=list)  # "METHOD path [Range]" of every request
    xet: bool = False  # announce Xet storage; its CAS service (here) answers every request with 404
    stopping: threading.Event = field(default_factory=threading.Event)  # releases silent faults
    page_size: int | None = None  # list this many files a page, linking the next as the Hub does

    def start(self) -> str:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        ).start()  # quick to stop
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def add(self, repo: str, path: str, content: bytes) -> None:
        self.files.setdefault(repo, {})[path] = content

    def fault_for(self, method: str, path: str) -> Fault | None:
        for prefix, fault in self.faults.items():
            cuts_a_head = method == "HEAD" and fault.cut_after is not None
            if path.startswith(prefix) and fault.times > 0 and not cuts_a_head:
                fault.times -= 1
                return fault
        return None


_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/?]+)")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>[^?]+)")


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # the test reads hub.log instead
            pass

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

        def _answer(self, body: bool) -> None:
            hub.log.append(f"{self.command} {self.path} {self.headers.get('Range') or ''}".rstrip())
            fault = hub.fault_for(self.command, self.path)
            if fault and fault.silent:
                hub.stopping.wait(SILENT_SECONDS)
                self.close_connection = True
                return None
            if fault and fault.status and fault.body is not None:
                return self._send(fault.status, fault.body, {"Content-Type": fault.content_type})
            if fault and fault.status:
                return self._send(
                    fault.status, b'{"error": "refused"}', {"X-Error-Code": fault.error_code or ""}
                )
            if match := _TREE.match(self.path):
                return self._tree(match["repo"], match["rev"])
            if self.path.startswith(
                "/xet-read-token"
            ):  # the token for Xet storage, whose service is /cas
                return self._send(
                    200,
                    b"",
                    {
                        "X-Xet-Cas-Url": f"http://{self.headers['Host']}/cas",
                        "X-Xet-Access-Token": "token",
                        "X-Xet-Token-Expiration": "4102444800",
                    },
                )
            if match := _RESOLVE.match(self.path):
                return self._resolve(match["repo"], match["file"], body, fault)
            self._send(404, b"{}", {"X-Error-Code": "RepoNotFound"})

        def _tree(self, repo: str, revision: str) -> None:
            if repo not in hub.files:
                return self._send(404, b"{}", {"X-Error-Code": "RepoNotFound"})
            items = [
                {
                    "type": "file",
                    "oid": hashlib.sha1(content).hexdigest(),
                    "path": path,
                    "size": hub.listed_sizes.get(f"{repo}/{path}", len(content)),
                    "lfs": {
                        "oid": hashlib.sha256(content).hexdigest(),
                        "size": len(content),
                        "pointerSize": 134,
                    },
                }
                for path, content in hub.files[repo].items()
            ]
            headers = {"Content-Type": "application/json"}
            if hub.page_size is not None:
                cursor = int(m[1]) if (m := re.search(r"[?&]cursor=(\d+)", self.path)) else 0
                items, rest = (
                    items[cursor : cursor + hub.page_size],
                    items[cursor + hub.page_size :],
                )
                if rest:
                    next_page = f"http://{self.headers['Host']}/api/models/{repo}/tree/{revision}"
                    headers["Link"] = f'<{next_page}?cursor={cursor + hub.page_size}>; rel="next"'
            self._send(200, json.dumps(items).encode(), headers)

        def _resolve(self, repo: str, path: str, body: bool, fault: Fault | None) -> None:
            content = hub.files.get(repo, {}).get(path)
            if content is None:
                return self._send(404, b"{}", {"X-Error-Code": "EntryNotFound"})
            sha256 = hashlib.sha256(content).hexdigest()
            data = hub.served.get(f"{repo}/{path}", content)
            start = (
                int(m[1])
                if (m := re.match(r"bytes=(\d+)-", self.headers.get("Range") or ""))
                else 0
            )
            headers = {
                "ETag": f'"{sha256}"',
                "X-Linked-Etag": f'"{sha256}"',
                "X-Linked-Size": str(len(data)),
                "X-Repo-Commit": COMMIT,
                "Accept-Ranges": "bytes",
            }
            if hub.xet:
                headers |= {
                    "X-Xet-Hash": sha256,
                    "X-Xet-Refresh-Route": f"http://{self.headers['Host']}/xet-read-token",
                }
            if start:
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            cut = fault.cut_after if fault else None
            self._send(
                206 if start else 200,
                data[start:] if body else b"",
                headers,
                length=len(data) - start,
                cut_after=None if cut is None else max(0, cut - start),
            )
            if fault and fault.then:
                fault.then()

        def _send(
            self,
            status: int,
            data: bytes,
            headers: dict[str, str],
            *,
            length: int | None = None,
            cut_after: int | None = None,
        ) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data) if length is None else length))
            self.end_headers()
            if self.command == "HEAD":
                return
            self.wfile.write(data if cut_after is None else data[:cut_after])
            if cut_after is not None:
                self.wfile.flush()
                self.close_connection = True
                self.connection.close()

    return Handler
