"""Hugging Face downloads through `huggingface_hub`, against a stand-in hub on loopback."""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import constants as hf_constants

from juggler.errors import CheckpointMissing, ChecksumMismatch, HubUnreachable, InsufficientStorage
from juggler.registry import download as dl
from juggler.registry.checkpoint import HfRef, resolve_path
from juggler.registry.download import Progress, choose_file, download, partial_path
from tests.registry.hub import StandInHub, running_hub

Q8 = b"GGUF" + bytes(range(256)) * 40  # 10 KiB: an "LFS" file, checked by SHA-256
FILES = {"README.md": b"# demo", "tiny-Q4_0.gguf": b"GGUF" + b"\x00" * 1000, "tiny-Q8_0.gguf": Q8}
REF = HfRef("acme", "tiny-GGUF", "Q8_0")


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StandInHub]:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path))
    with running_hub({"acme/tiny-GGUF": dict(FILES)}) as h:
        yield h


def leftovers(root: Path) -> list[str]:
    return [p.name for p in root.rglob("*") if p.is_file() and not p.name.endswith(".lock")]


def test_choose_file_by_quant() -> None:
    files = ["a/x-Q4_K_M.gguf", "a/x-Q8_0.gguf", "mmproj-x.gguf", "README.md"]
    assert choose_file(files, "Q8_0") == "a/x-Q8_0.gguf"
    assert choose_file(files, None) == "a/x-Q4_K_M.gguf"
    with pytest.raises(CheckpointMissing):
        choose_file(files, "Q2_K")


def test_download_then_resolve_and_a_cached_file_is_not_fetched_again(
    hub: StandInHub, tmp_path: Path
) -> None:
    with pytest.raises(CheckpointMissing, match="not downloaded"):
        resolve_path("acme/tiny-GGUF:Q8_0")
    path = download(REF, endpoint=hub.url)
    assert path.read_bytes() == Q8
    assert resolve_path("acme/tiny-GGUF:Q8_0") == path
    asked = len(hub.requests)
    assert download(REF, endpoint=hub.url) == path
    assert len(hub.requests) == asked, "a downloaded file needs no hub (it works offline)"
    assert leftovers(tmp_path) == ["tiny-Q8_0.gguf"]


def test_a_small_file_is_checked_by_its_git_blob_id(hub: StandInHub) -> None:
    path = download(HfRef("acme", "tiny-GGUF", "Q4_0"), endpoint=hub.url)
    assert path.read_bytes() == FILES["tiny-Q4_0.gguf"]


def test_progress_events_arrive_and_end_at_the_file_size(hub: StandInHub) -> None:
    events: list[Progress] = []
    download(REF, endpoint=hub.url, on_progress=events.append)
    assert events and all(e.file == "tiny-Q8_0.gguf" and e.total_files == 1 for e in events)
    assert events[-1].bytes_downloaded == events[-1].bytes_total == len(Q8)
    assert events[-1].percent == 100
    done = [e.bytes_downloaded for e in events]
    assert done == sorted(done), "progress never goes backwards"


def test_a_dropped_connection_resumes_with_a_range_request(
    hub: StandInHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13: "interrupted download resumes". huggingface_hub hands bytes over in
    chunks (10 MiB); smaller chunks let a 10 KiB file show it."""
    monkeypatch.setattr(hf_constants, "DOWNLOAD_CHUNK_SIZE", 1000)
    hub.cut_after["tiny-Q8_0.gguf"] = 3000
    path = download(REF, endpoint=hub.url)
    assert path.read_bytes() == Q8
    assert hub.gets_of("tiny-Q8_0.gguf") == [None, "bytes=3000-"]


def test_an_interrupted_pull_continues_from_its_partial_file(
    hub: StandInHub, tmp_path: Path
) -> None:
    """A pull that stopped (server killed mid-download) left `.partial`; the next pull
    fetches only the rest."""
    target = tmp_path / "models" / "acme--tiny-GGUF" / "tiny-Q8_0.gguf"
    target.parent.mkdir(parents=True)
    partial_path(target).write_bytes(Q8[:4000])
    assert download(REF, endpoint=hub.url).read_bytes() == Q8
    assert hub.gets_of("tiny-Q8_0.gguf") == ["bytes=4000-"]
    assert not partial_path(target).exists()


def test_a_corrupt_download_is_detected_and_deleted(hub: StandInHub, tmp_path: Path) -> None:
    """Issue 13: "a corrupt file is detected"."""
    hub.corrupt["tiny-Q8_0.gguf"] = Q8[:-1] + b"X"
    with pytest.raises(ChecksumMismatch, match="corrupt") as err:
        download(REF, endpoint=hub.url)
    assert err.value.status == 502 and err.value.code == "checksum_mismatch"
    assert leftovers(tmp_path) == [], "a corrupt file never looks downloaded"
    hub.corrupt.clear()
    assert download(REF, endpoint=hub.url).read_bytes() == Q8


def test_unknown_repo_or_quant_is_checkpoint_missing(hub: StandInHub) -> None:
    with pytest.raises(CheckpointMissing, match="not found|no such"):
        download(HfRef("acme", "nope", None), endpoint=hub.url)
    with pytest.raises(CheckpointMissing, match="Q2_K"):
        download(HfRef("acme", "tiny-GGUF", "Q2_K"), endpoint=hub.url)


def test_an_unreachable_hub_is_a_clear_502_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path))
    with pytest.raises(HubUnreachable, match="cannot reach the model hub") as err:
        download(HfRef("org", "repo", None), endpoint="http://127.0.0.1:9")
    assert err.value.status == 502


def test_a_full_disk_is_a_clear_507_and_leaves_no_partial_file(
    hub: StandInHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 10's chaos: "fill the disk during a pull"."""
    real_write = dl._CountingFile.write

    def full_disk(self: Any, data: bytes) -> int:
        real_write(self, data[:2])  # a partial file exists when the disk fills up
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dl._CountingFile, "write", full_disk)
    with pytest.raises(InsufficientStorage, match="no space left") as err:
        download(REF, endpoint=hub.url)
    assert err.value.status == 507
    assert leftovers(tmp_path) == []


def test_concurrent_pulls_of_one_file_download_it_once(hub: StandInHub) -> None:
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(download(REF, endpoint=hub.url)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 4 and len(set(results)) == 1
    assert len(hub.gets_of("tiny-Q8_0.gguf")) == 1
