"""Download a Hugging Face checkpoint (`org/repo:QUANT`) into Juggler's model cache.

Speaks the hub's public HTTP API: `GET {endpoint}/api/models/{repo}/tree/main` lists the
files, `GET {endpoint}/{repo}/resolve/main/{file}` fetches one. The endpoint is
`$JUGGLER_HF_ENDPOINT`, else `$HF_ENDPOINT`, else https://huggingface.co, so a mirror or a
local stand-in works the same. Files land in a unique temporary file beside the target and
are renamed when whole; concurrent pulls of one file wait for the first.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import httpx

from juggler.errors import CheckpointMissing, HubUnreachable
from juggler.registry.checkpoint import HfRef, hf_cache_dir
from juggler.registry.locks import disk_errors, exclusive, temp_beside

DEFAULT_ENDPOINT = "https://huggingface.co"


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


def download(
    ref: HfRef,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    on_progress: Callable[[int, int | None], None] | None = None,
) -> Path:
    """Fetch the checkpoint's GGUF into the cache (skipped if already there). Blocks.
    Raises CheckpointMissing when the repo or file does not exist, HubUnreachable when
    the hub cannot be reached or fails."""
    where = (endpoint or hub_endpoint()).rstrip("/")
    try:
        return _download(ref, endpoint=where, token=token, on_progress=on_progress)
    except httpx.HTTPStatusError as exc:
        raise HubUnreachable(
            f"{where} answered {exc.response.status_code} for {ref.repo_id}"
        ) from exc
    except httpx.HTTPError as exc:
        raise HubUnreachable(f"cannot reach the model hub {where}: {exc!r}") from exc


def _download(
    ref: HfRef,
    *,
    endpoint: str,
    token: str | None,
    on_progress: Callable[[int, int | None], None] | None,
) -> Path:
    token = token or os.environ.get("HF_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(
        headers=headers, timeout=httpx.Timeout(30.0, read=300.0), follow_redirects=True
    ) as http:
        listing = http.get(f"{endpoint}/api/models/{ref.repo_id}/tree/main")
        if listing.status_code in (401, 403, 404):
            raise CheckpointMissing(
                f"{ref.repo_id} not found on {endpoint} ({listing.status_code})"
            )
        listing.raise_for_status()
        files = [str(item["path"]) for item in listing.json() if item.get("type") == "file"]
        name = choose_file(files, ref.quant)
        target = hf_cache_dir(ref) / Path(name).name
        with exclusive(target):  # concurrent pulls of one file download it once
            if target.is_file():
                return target
            partial = temp_beside(target)
            try:
                with disk_errors(str(target)):
                    url = f"{endpoint}/{ref.repo_id}/resolve/main/{name}"
                    _fetch(http, url, partial, on_progress)
                    partial.replace(target)
            finally:
                partial.unlink(missing_ok=True)
        return target


def _fetch(
    http: httpx.Client,
    url: str,
    partial: Path,
    on_progress: Callable[[int, int | None], None] | None,
) -> None:
    with http.stream("GET", url) as response:
        if response.status_code == 404:
            raise CheckpointMissing(f"{url} not found")
        response.raise_for_status()
        total = (
            int(response.headers["content-length"])
            if "content-length" in response.headers
            else None
        )
        done = 0
        with partial.open("wb") as out:
            for chunk in response.iter_bytes(1 << 20):
                out.write(chunk)
                done += len(chunk)
                if on_progress:
                    on_progress(done, total)
    if total is not None and done != total:
        raise CheckpointMissing(f"download of {url} stopped at {done} of {total} bytes")
