"""Hugging Face downloads, against a local stand-in hub on loopback."""

from __future__ import annotations

import errno
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from juggler.errors import CheckpointMissing, HubUnreachable, InsufficientStorage
from juggler.registry.checkpoint import HfRef, resolve_path
from juggler.registry.download import choose_file, download

FILES = {
    "README.md": b"# demo",
    "tiny-Q4_0.gguf": b"GGUF" + b"\x00" * 1000,
    "tiny-Q8_0.gguf": b"GGUF" + b"\x01" * 2000,
}


class Hub(BaseHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self) -> None:
        Hub.requests.append(self.path)
        if self.path == "/api/models/acme/tiny-GGUF/tree/main":
            body = json.dumps(
                [{"type": "file", "path": p, "size": len(b)} for p, b in FILES.items()]
            ).encode()
        elif (
            self.path.startswith("/acme/tiny-GGUF/resolve/main/")
            and self.path.rsplit("/", 1)[1] in FILES
        ):
            body = FILES[self.path.rsplit("/", 1)[1]]
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_choose_file_by_quant() -> None:
    files = ["a/x-Q4_K_M.gguf", "a/x-Q8_0.gguf", "mmproj-x.gguf", "README.md"]
    assert choose_file(files, "Q8_0") == "a/x-Q8_0.gguf"
    assert choose_file(files, None) == "a/x-Q4_K_M.gguf"
    with pytest.raises(CheckpointMissing):
        choose_file(files, "Q2_K")


def test_download_then_resolve(hub: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path))
    with pytest.raises(CheckpointMissing, match="not downloaded"):
        resolve_path("acme/tiny-GGUF:Q8_0")
    path = download(HfRef("acme", "tiny-GGUF", "Q8_0"), endpoint=hub)
    assert path.read_bytes() == FILES["tiny-Q8_0.gguf"]
    assert resolve_path("acme/tiny-GGUF:Q8_0") == path
    Hub.requests.clear()
    assert download(HfRef("acme", "tiny-GGUF", "Q8_0"), endpoint=hub) == path
    assert not any("resolve" in r for r in Hub.requests), "a cached file is not fetched again"


def test_unknown_repo_is_checkpoint_missing(
    hub: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path))
    with pytest.raises(CheckpointMissing, match="not found"):
        download(HfRef("acme", "nope", None), endpoint=hub)


def test_an_unreachable_hub_is_a_clear_502(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path))
    with pytest.raises(HubUnreachable, match="cannot reach the model hub") as err:
        download(HfRef("org", "repo", None), endpoint="http://127.0.0.1:9")
    assert err.value.status == 502


def test_a_full_disk_is_a_clear_507_and_leaves_no_partial_file(
    hub: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 10's chaos: "fill the disk during a pull"."""
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path))
    real_open = Path.open

    def full_disk(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if "w" in mode and self.name.endswith(".tmp"):
            f = real_open(self, mode, *args, **kwargs)
            f.write(b"GG")  # a partial file exists when the disk fills up
            f.close()
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", full_disk)
    with pytest.raises(InsufficientStorage, match="no space left") as err:
        download(HfRef("acme", "tiny-GGUF", "Q8_0"), endpoint=hub)
    assert err.value.status == 507
    left = [p.name for p in tmp_path.rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    assert left == []
