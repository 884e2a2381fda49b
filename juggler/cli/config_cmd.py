"""`juggler config get|set`: read and write the config file (validated)."""

from __future__ import annotations

from typing import Annotated

import httpx
import typer

from juggler.cli.client import Client, ServerError
from juggler.cli.common import cli_settings, config_app, err, out
from juggler.config import ConfigError, config_path, read_config_file, set_value
from juggler.router.lemonade.config_routes import NEXT_LOAD, NOW


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
        if key.strip() in RUNTIME_KEYS:
            _apply_to_running_server(key.strip())
        else:
            out.print("  (takes effect when Juggler starts)")


#: Settings a running server takes over `POST /internal/set` (as Lemonade's CLI sends
#: them): at once, or at the next load of a model.
RUNTIME_KEYS = NOW | NEXT_LOAD


def _apply_to_running_server(key: str) -> None:
    """Tell a running server too, so the setting takes effect without a restart."""
    settings = cli_settings()
    value = settings.model_dump(mode="json")[key]
    try:
        Client(settings, timeout_s=10).post("/internal/set", {key: value}, admin=True)
    except httpx.TransportError:
        out.print("  (no server running: it takes effect when Juggler starts)")
        return
    except ServerError as exc:
        err.print(f"[yellow]warning:[/yellow] the running server refused it: {exc.message}")
        return
    out.print("  applied to the running server")


@config_app.command("get")
def config_get(key: Annotated[str | None, typer.Argument()] = None) -> None:
    """Show the effective settings (flags aside), or one of them."""
    settings = cli_settings()
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
