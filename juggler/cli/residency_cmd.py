"""Commands that drive a running server's residency: load, unload, pin, unpin, ps.

`load` checks `/api/v1/health` first and warns when every slot of the model's type is
held by a pinned model (seed 002: "If all slots for that model type are occupied by
pinned models, the CLI will output a pre-emptive warning alerting you that loading will
fail"); the server then answers 409 `slots_pinned_error`.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.table import Table

from juggler.cli.client import Client, ServerError
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


def pinned_slots_warning(health: dict[str, Any], model_type: str, model_name: str) -> str | None:
    """The warning to print before loading `model_name`, or None. Pure."""
    limit = health.get("max_models", {}).get(model_type, 1)
    same = [m for m in health.get("all_models_loaded", []) if m.get("type") == model_type]
    if limit == -1 or len(same) < limit or any(m["model_name"] == model_name for m in same):
        return None
    if not all(m.get("pinned") for m in same):
        return None
    return (
        f"every {model_type} slot ({limit}) is held by a pinned model; this load will fail "
        "with slots_pinned_error. Unpin or unload one first."
    )


def _model_type(client: Client, model_name: str) -> str | None:
    try:
        entry = client.get(f"/api/v1/models/{model_name}")
    except ServerError:
        return None  # unknown: the load itself says so
    return str(entry.get("type") or "llm")


@app.command()
def load(
    model_name: str,
    pinned: Annotated[bool, typer.Option("--pinned", help="Pin it in memory.")] = False,
    save_options: Annotated[
        bool, typer.Option("--save-options", help="Use these options for every later load.")
    ] = False,
    ctx_size: Annotated[int | None, typer.Option()] = None,
    llamacpp_backend: Annotated[str | None, typer.Option()] = None,
    llamacpp_args: Annotated[str | None, typer.Option()] = None,
    host: HostOpt = None,
    port: PortOpt = None,
) -> None:
    """Load a model (warns first when every slot of its type is pinned)."""
    client = connect(host, port)
    model_type = call(_model_type, client, model_name)
    if model_type is not None:
        health = call(client.get, "/api/v1/health")
        warning = pinned_slots_warning(health, model_type, model_name)
        if warning:
            err.print(f"[yellow]warning:[/yellow] {warning}")
    body: dict[str, Any] = {"model_name": model_name}
    if pinned:
        body["pinned"] = True
    if save_options:
        body["save_options"] = True
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


def _cores(compute: dict[str, Any] | None) -> str:
    """A model's share of the cores: threads, the cpus, and whether it is busy."""
    if not compute:
        return ""
    cpus = compute.get("cpus") or []
    where = f" on {cpus[0]}-{cpus[-1]}" if len(cpus) > 1 else f" on {cpus[0]}" if cpus else ""
    tag = "" if compute.get("planned", True) else " (fixed)"
    tag += " (GPU)" if compute.get("gpu") else ""
    return f"{compute.get('threads')}{where}{tag}"


def _vram(vram: int | None, layers: dict[str, Any] | None) -> str:
    """A model's GPU memory and the layers it offloaded ("1582 (17/17 layers)")."""
    if not vram:
        return ""
    done, of = (layers or {}).get("layers"), (layers or {}).get("of")
    return f"{vram / 1e6:.0f}" + (f" ({done}/{of} layers)" if of else "")


def loaded_table(health: dict[str, Any]) -> Table:
    table = Table(
        "model",
        "type",
        "device",
        "pinned",
        "status",
        "streaming",
        "ctx",
        "memory (MB)",
        "VRAM (MB)",
        "cores",
        "last use",
        title=f"max models per type: {health.get('max_models')}",
    )
    for m in health.get("all_models_loaded", []):
        last = dt.datetime.fromtimestamp(float(m.get("last_use") or 0)).strftime("%H:%M:%S")
        rss = (m.get("memory") or {}).get("rss_bytes")
        vram = (m.get("memory") or {}).get("vram_bytes")
        table.add_row(
            m["model_name"],
            m.get("type", ""),
            m.get("device", ""),
            "yes" if m.get("pinned") else "",
            str(m.get("status", "")),
            "yes" if m.get("is_streaming") else "",
            str((m.get("recipe_options") or {}).get("ctx_size", "")),
            f"{rss / 1e6:.0f}" if rss else "",
            _vram(vram, m.get("gpu_layers")),
            _cores(m.get("compute")),
            last,
        )
    return table


@app.command()
def ps(
    watch: Annotated[bool, typer.Option("--watch", help="Refresh until Ctrl-C.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.")] = 1.0,
    host: HostOpt = None,
    port: PortOpt = None,
) -> None:
    """The loaded models (with --watch, a live table)."""
    client = connect(host, port)
    if not watch:
        out.print(loaded_table(call(client.get, "/api/v1/health")))
        return
    with Live(loaded_table(call(client.get, "/api/v1/health")), console=out) as live:
        try:
            while True:
                time.sleep(max(0.1, interval))
                live.update(loaded_table(call(client.get, "/api/v1/health")))
        except KeyboardInterrupt:
            return


@app.command()
def status(host: HostOpt = None, port: PortOpt = None) -> None:
    """The loaded models (same as `ps`)."""
    ps(watch=False, interval=1.0, host=host, port=port)
