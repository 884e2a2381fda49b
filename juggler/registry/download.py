"""Download a Hugging Face checkpoint (`org/repo:QUANT`) into Juggler's model cache.

Through `huggingface_hub`: its session lists the repository (`/api/models/{repo}/tree/
main`), `get_hf_file_metadata` reads the file's size, checksum and location (a HEAD on
`/{repo}/resolve/main/{file}`), and `http_get` transfers the bytes, resuming with a
`Range` request when the connection drops mid-file. The endpoint is
`$JUGGLER_HF_ENDPOINT`, else `$HF_ENDPOINT`, else https://huggingface.co, so a mirror or
a local stand-in works the same.

What Juggler adds around it:
- resume across calls: bytes land in `.<file>.partial` beside the target, a name that
  stays the same, so a pull that was interrupted (a dropped connection past the retries,
  a killed server) continues from where it stopped the next time;
- checksums: the whole file is checked against the hub's SHA-256 (LFS files) or git blob
  id (small files) before it is renamed into place; a mismatch deletes it (502
  `checksum_mismatch`), so a corrupt file never looks downloaded;
- one writer per file (`locks.exclusive`): concurrent pulls, in this process or another,
  download once; a full disk is a 507 and leaves no partial file;
- progress: `on_progress(Progress)` after every chunk, from the downloading thread.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

import httpx2
from huggingface_hub import get_hf_file_metadata, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import http_get
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils._headers import build_hf_headers
from huggingface_hub.utils._http import get_session, hf_raise_for_status
from huggingface_hub.utils.tqdm import disable_progress_bars

from juggler.errors import (
    CheckpointMissing,
    ChecksumMismatch,
    HubUnreachable,
    InsufficientStorage,
    JugglerError,
)
from juggler.registry.checkpoint import HfRef, find_hf_file, hf_cache_dir
from juggler.registry.locks import disk_errors, exclusive

DEFAULT_ENDPOINT = "https://huggingface.co"
#: Seconds to wait for the hub to answer one request (not the whole transfer).
TIMEOUT_S = 30.0
_HASH_CHUNK = 1 << 20


@dataclass(frozen=True)
class Progress:
    """One step of a download (Lemonade's `progress` event fields)."""

    file: str
    file_index: int
    total_files: int
    bytes_downloaded: int
    bytes_total: int | None
    #: The file's checksum as the hub publishes it (SHA-256, or a git blob id).
    digest: str | None = None

    @property
    def percent(self) -> int:
        if not self.bytes_total:
            return 0
        return min(100, self.bytes_downloaded * 100 // self.bytes_total)


ProgressFn = Callable[[Progress], None]


def hub_endpoint() -> str:
    return (
        os.environ.get("JUGGLER_HF_ENDPOINT") or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    ).rstrip("/")


def choose_file(files: list[str], quant: str | None) -> str:
    """The GGUF to fetch: the one whose name holds QUANT (case-insensitive); without a
    QUANT, a Q4_K_M file if there is one, else the only GGUF. Pure."""
    ggufs = sorted(f for f in files if f.endswith(".gguf") and "mmproj" not in f.lower())
    if quant:
        matches = [f for f in ggufs if quant.lower() in Path(f).name.lower()]
    else:
        matches = [f for f in ggufs if "q4_k_m" in f.lower()] or (ggufs if len(ggufs) == 1 else [])
    if not matches:
        wanted = f"quant {quant!r}" if quant else "one default GGUF"
        raise CheckpointMissing(f"no GGUF file for {wanted} among {ggufs or 'no files'}")
    return matches[0]


def partial_path(target: Path) -> Path:
    """Where the bytes of `target` gather until they are whole and checked."""
    return target.with_name(f".{target.name}.partial")


def download(
    ref: HfRef,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    on_progress: ProgressFn | None = None,
) -> Path:
    """Fetch the checkpoint's GGUF into the cache (nothing is fetched if it is there).
    Blocks (run it in a thread). Raises CheckpointMissing (no such repository or file),
    HubUnreachable (502: cannot reach the hub, or it failed), ChecksumMismatch (502) and
    InsufficientStorage (507)."""
    where = (endpoint or hub_endpoint()).rstrip("/")
    token = token or os.environ.get("HF_TOKEN") or None
    disable_progress_bars()  # progress goes to `on_progress`, never to stderr
    try:
        return _download(ref, where, token, on_progress)
    except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
        raise CheckpointMissing(f"repository {ref.repo_id} not found on {where}") from exc
    except EntryNotFoundError as exc:
        raise CheckpointMissing(f"{ref.repo_id}: file not found on {where}") from exc
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        if status in (401, 403, 404):
            raise CheckpointMissing(f"{ref.repo_id} not found on {where} ({status})") from exc
        raise HubUnreachable(f"{where} answered {status} for {ref.repo_id}") from exc
    except httpx2.HTTPError as exc:
        raise HubUnreachable(f"cannot reach the model hub {where}: {exc!r}") from exc
    except OSError as exc:
        if exc.errno is None:  # http_get's size check: the hub sent too few or too many bytes
            raise HubUnreachable(f"download from {where} failed: {exc}") from exc
        raise JugglerError(f"cannot write the model file: {exc}") from exc


def list_files(repo_id: str, endpoint: str, token: str | None) -> dict[str, RepoFile]:
    """The repository's files by path (one request, no retries: an unreachable hub is
    reported at once, not after a minute of back-off)."""
    response = get_session().get(
        f"{endpoint}/api/models/{repo_id}/tree/main",
        params={"recursive": True},
        headers=build_hf_headers(token=token),
        timeout=TIMEOUT_S,
    )
    hf_raise_for_status(response)
    entries = response.json()
    if not isinstance(entries, list):
        raise HubUnreachable(f"{endpoint} sent a tree listing that is not a list")
    return {
        str(e["path"]): RepoFile(**e)  # type: ignore[no-untyped-call]
        for e in entries
        if e.get("type") == "file"
    }


def _download(ref: HfRef, endpoint: str, token: str | None, on_progress: ProgressFn | None) -> Path:
    have = find_hf_file(ref)
    folder = hf_cache_dir(ref)
    wanted = [f for f in ref.extra_files if not (folder / Path(f).name).is_file()]
    if have is not None and not wanted:
        return have  # checked when it was downloaded; no need to ask the hub again
    files = list_files(ref.repo_id, endpoint, token)
    for extra in wanted:  # a vision projector (issue 51), before the model
        if extra not in files:
            raise CheckpointMissing(f"{ref.repo_id}: no file {extra!r} on {endpoint}")
        _fetch_file(ref, files, extra, endpoint, token, on_progress)
    if have is not None:
        return have
    return _fetch_file(
        ref, files, choose_file(list(files), ref.quant), endpoint, token, on_progress
    )


def _fetch_file(
    ref: HfRef,
    files: dict[str, RepoFile],
    name: str,
    endpoint: str,
    token: str | None,
    on_progress: ProgressFn | None,
) -> Path:
    entry = files[name]
    target = hf_cache_dir(ref) / Path(name).name
    if target.is_file():
        return target
    with exclusive(target):  # concurrent pulls of one file download it once
        if target.is_file():
            return target  # another pull finished it meanwhile
        meta = get_hf_file_metadata(
            hf_hub_url(ref.repo_id, name, endpoint=endpoint), token=token, timeout=TIMEOUT_S
        )
        size = entry.size if entry.size is not None else meta.size
        partial = partial_path(target)
        digest = entry.lfs.sha256 if entry.lfs is not None else entry.blob_id
        report = _Reporter(Path(name).name, size, digest, on_progress)
        try:
            with disk_errors(str(target)):
                _fetch(meta.location, partial, size, build_hf_headers(token=token), report)
                _verify(partial, entry, meta.etag, name)
                partial.replace(target)  # atomic: readers see no file or the whole file
        except (InsufficientStorage, ChecksumMismatch):
            partial.unlink(missing_ok=True)  # useless to resume from
            raise
    return target


def _fetch(
    url: str, partial: Path, size: int | None, headers: dict[str, str], report: _Reporter
) -> None:
    """Append the missing bytes to `partial` (resuming from its length)."""
    have = partial.stat().st_size if partial.is_file() else 0
    if size is not None and have > size:
        partial.unlink()
        have = 0
    with partial.open("r+b" if have else "wb") as f:
        f.seek(have)
        report(have)
        counting = _CountingFile(f, have, report)
        http_get(
            url,
            cast(BinaryIO, counting),
            resume_size=have,
            headers=headers,
            expected_size=size,
            displayed_filename=report.file,
        )


def _verify(path: Path, entry: RepoFile, etag: str | None, name: str) -> None:
    """Raise ChecksumMismatch unless `path` has the checksum the hub published."""
    if entry.lfs is not None:
        expected, actual = entry.lfs.sha256, _digest(path, hashlib.sha256())
    elif etag and len(etag) == 64:
        expected, actual = etag, _digest(path, hashlib.sha256())
    else:  # a small file kept in git: its blob id is sha1("blob <size>\0" + content)
        expected = entry.blob_id
        actual = _digest(path, hashlib.sha1(f"blob {path.stat().st_size}\0".encode()))
    if expected.lower() != actual:
        raise ChecksumMismatch(
            f"{name}: the downloaded file is corrupt (checksum {actual[:12]}..., the hub "
            f"says {expected[:12]}...); it was deleted, pull again"
        )


def _digest(path: Path, h: Any) -> str:
    with path.open("rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return str(h.hexdigest())


class _Reporter:
    def __init__(
        self, file: str, size: int | None, digest: str, on_progress: ProgressFn | None
    ) -> None:
        self.file = file
        self.size = size
        self.digest = digest
        self.on_progress = on_progress

    def __call__(self, done: int) -> None:
        if self.on_progress is not None:
            self.on_progress(Progress(self.file, 1, 1, done, self.size, self.digest))


class _CountingFile:
    """The partial file as `http_get` writes it, reporting every chunk."""

    def __init__(self, f: BinaryIO, done: int, report: _Reporter) -> None:
        self.f = f
        self.start = f.tell() - done
        self.report = report

    def write(self, data: bytes) -> int:
        n = self.f.write(data)
        self.report(self.f.tell() - self.start)
        return n

    def tell(self) -> int:
        return self.f.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.f.seek(offset, whence)

    def truncate(self, size: int | None = None) -> int:
        return self.f.truncate(size)
