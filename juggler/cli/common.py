"""What every `juggler` command shares: the Typer apps, consoles, settings and client."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console

from juggler.cli.client import Client, ServerError
from juggler.config import ConfigError, Settings, load_settings

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


def cli_settings(**cli: Any) -> Settings:
    try:
        return load_settings(cli)
    except ConfigError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None


def connect(host: str | None = None, port: int | None = None) -> Client:
    return Client(cli_settings(host=host, port=port))


def call_with_spinner(message: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`call`, with a spinner on the terminal while it runs (errors print after it)."""

    def spinning() -> Any:
        with err.status(message):
            return fn(*args, **kwargs)

    return call(spinning)


def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
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
