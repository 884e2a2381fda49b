"""`juggler serve`: run the router (and load the default model)."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

import typer

from juggler.cli.common import HostOpt, PortOpt, app, cli_settings


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
        str | None, typer.Option(help="Require this key on /internal/* and the logs.")
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
    compute_plan: Annotated[
        bool | None,
        typer.Option(
            "--compute-plan/--no-compute-plan",
            help="Divide the cores between busy backends (default on).",
        ),
    ] = None,
) -> None:
    """Start the server (and load the default model)."""
    import uvicorn

    from juggler.router.app import create_app

    settings = cli_settings(
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
        compute_plan=compute_plan,
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

    from juggler.router.core.connections import GuardedHttpProtocol, raise_fd_limit

    # Descriptors for every allowed connection, its backend connection, and files.
    raise_fd_limit(2 * settings.max_connections + 1024)

    class Protocol(GuardedHttpProtocol):
        header_timeout_s = settings.header_timeout_s

    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=level,
        http=Protocol,
        limit_concurrency=settings.max_connections,
        # Past the drain, streams have been ended: a few seconds more to send the end.
        timeout_graceful_shutdown=int(settings.drain_timeout) + 5,
    )
    DrainingServer(config).run()
