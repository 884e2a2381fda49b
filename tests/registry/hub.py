"""A stand-in Hugging Face hub on loopback: the three calls `huggingface_hub` makes.

- `GET /api/models/{org}/{repo}/tree/main`: the file listing (LFS entries carry their
  SHA-256, small files their git blob id), 404 `X-Error-Code: RepoNotFound` otherwise;
- `HEAD /{org}/{repo}/resolve/main/{file}`: `X-Repo-Commit`, the ETag (`X-Linked-Etag`
  for LFS files) and the size;
- `GET` of the same path, honouring `Range: bytes=N-` with 206.

Knobs for the failure tests: `cut_after[file] = n` closes the connection after n bytes
of the next full GET of that file (once); `corrupt[file] = data` serves other bytes than
the listing describes. Every request is recorded as (method, path, range header).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMMIT = "0123456789abcdef0123456789abcdef01234567"
#: Files at least this large are "LFS" files (checked by SHA-256), smaller ones by git id.
LFS_MIN = 1024


class StandInHub:
    def __init__(self, repos: dict[str, dict[str, bytes]]) -> None:
        self.repos = repos
        self.cut_after: dict[str, int] = {}
        self.corrupt: dict[str, bytes] = {}
        self.requests: list[tuple[str, str, str | None]] = []
        self.connections: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> StandInHub:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            open_connections = list(self.connections)
        for conn in open_connections:  # keep-alive connections a client left open
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self.thread.join(timeout=10)

    def gets_of(self, file: str) -> list[str | None]:
        """The Range headers of the GETs of `file` (None: a full GET)."""
        with self.lock:
            return [r for m, p, r in self.requests if m == "GET" and p.endswith("/" + file)]

    def listing(self, repo: str) -> list[dict[str, Any]]:
        out = []
        for path, data in self.repos[repo].items():
            entry: dict[str, Any] = {"type": "file", "path": path, "size": len(data)}
            entry["oid"] = hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()
            if len(data) >= LFS_MIN:
                sha = hashlib.sha256(data).hexdigest()
                entry["lfs"] = {"oid": sha, "size": len(data), "pointerSize": 134}
            out.append(entry)
        return out

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with hub.lock:
                    hub.connections.add(self.connection)

            def finish(self) -> None:
                with hub.lock:
                    hub.connections.discard(self.connection)
                super().finish()

            def _record(self) -> None:
                with hub.lock:
                    hub.requests.append((self.command, self.path, self.headers.get("Range")))

            def _missing(self, code: str) -> None:
                self.send_response(404)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _file(self) -> tuple[str, str, bytes] | None:
                parts = self.path.split("?")[0].lstrip("/").split("/")
                if len(parts) < 5 or parts[2:4] != ["resolve", "main"]:
                    return None
                repo, name = "/".join(parts[:2]), "/".join(parts[4:])
                if repo not in hub.repos:
                    self._missing("RepoNotFound")
                    return ("", "", b"")
                if name not in hub.repos[repo]:
                    self._missing("EntryNotFound")
                    return ("", "", b"")
                return repo, name, hub.repos[repo][name]

            def do_HEAD(self) -> None:
                self._record()
                found = self._file()
                if found is None:
                    self._missing("RepoNotFound")
                    return
                repo, _, data = found
                if not repo:
                    return
                self.send_response(200)
                self.send_header("X-Repo-Commit", COMMIT)
                sha = hashlib.sha256(data).hexdigest()
                if len(data) >= LFS_MIN:
                    self.send_header("X-Linked-Etag", f'"{sha}"')
                    self.send_header("X-Linked-Size", str(len(data)))
                git = hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()
                self.send_header("ETag", f'"{git}"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()

            def do_GET(self) -> None:
                self._record()
                path = self.path.split("?")[0]
                if path.startswith("/api/models/") and path.endswith("/tree/main"):
                    repo = path.removeprefix("/api/models/").removesuffix("/tree/main")
                    if repo not in hub.repos:
                        self._missing("RepoNotFound")
                        return
                    body = json.dumps(hub.listing(repo)).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                found = self._file()
                if found is None:
                    self._missing("RepoNotFound")
                    return
                repo, name, data = found
                if not repo:
                    return
                data = hub.corrupt.get(name, data)
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    start = int(rng.removeprefix("bytes=").split("-")[0])
                body = data[start:]
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with hub.lock:
                    cut = hub.cut_after.pop(name, None) if not start else None
                if cut is not None:
                    self.wfile.write(body[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        return Handler


@contextmanager
def running_hub(repos: dict[str, dict[str, bytes]]) -> Iterator[StandInHub]:
    hub = StandInHub(repos).start()
    try:
        yield hub
    finally:
        hub.stop()
