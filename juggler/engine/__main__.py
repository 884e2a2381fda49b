"""`python -m juggler.engine`: the backend process for one model.

Parses the command line (unknown arguments exit 2 with argparse's message), loads the
model on the main thread (a bad file exits 1 with a message on stderr) and only then
starts uvicorn, so the port does not listen until the model is loaded; the workers and
the master start in the app's lifespan, after which /health answers 200.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from juggler.types import ModelType


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m juggler.engine", description="Juggler's llama.cpp backend for one model"
    )
    p.add_argument("--model-path", required=True)
    p.add_argument("--model-name", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--type", choices=["llm", "embedding", "reranking"], default="llm")
    p.add_argument("--ctx-size", type=int, default=4096)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--parallel", type=int, default=8, help="sequences per worker")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--n-gpu-layers", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument(
        "--prefill-chunk",
        type=int,
        default=256,
        help="most prompt tokens a tick prefills while others decode",
    )
    p.add_argument(
        "--stream-queue-size",
        type=int,
        default=256,
        help="unconsumed events after which a slow stream is ended",
    )
    p.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto")
    p.add_argument(
        "--cache-cells",
        type=int,
        default=None,
        help="KV cells kept for prefix reuse by stateless requests (default: ctx-size / 8)",
    )
    p.add_argument(
        "--parked-cells",
        type=int,
        default=None,
        help="tokens of cached prefixes an idle worker parks outside the KV cache, in host "
        "memory, for later reuse (default: ctx-size; 0 turns parking off)",
    )
    p.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    return p


def _positive(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for field in (
        "ctx_size",
        "workers",
        "parallel",
        "threads",
        "batch_size",
        "prefill_chunk",
        "stream_queue_size",
    ):
        if getattr(args, field) < 1:
            parser.error(f"--{field.replace('_', '-')} must be at least 1")
    if args.cache_cells is not None and args.cache_cells < 0:
        parser.error("--cache-cells must be at least 0")
    if args.parked_cells is not None and args.parked_cells < 0:
        parser.error("--parked-cells must be at least 0")
    if args.parallel > 256:
        parser.error("--parallel must be at most 256 (llama.cpp's sequence limit)")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _positive(parser, args)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    import uvicorn

    from juggler.engine.http.server import create_app
    from juggler.engine.llama.native import Model, init_backend
    from juggler.engine.runtime import Engine, EngineConfig
    from juggler.errors import JugglerError

    init_backend(verbose=args.log_level == "debug")
    config = EngineConfig(
        model_path=args.model_path,
        model_name=args.model_name,
        type=ModelType(args.type),
        ctx_size=args.ctx_size,
        workers=args.workers,
        parallel=args.parallel,
        threads=args.threads,
        n_gpu_layers=args.n_gpu_layers,
        batch_size=args.batch_size,
        prefill_chunk=args.prefill_chunk,
        stream_queue_size=args.stream_queue_size,
        flash_attn=args.flash_attn,
        cache_cells=args.cache_cells,
        parked_cells=args.parked_cells,
    )
    try:
        model = Model(config.model_path, n_gpu_layers=config.n_gpu_layers)
        engine = Engine(config, model)
    except JugglerError as exc:
        print(f"juggler.engine: cannot load {config.model_path}: {exc.message}", file=sys.stderr)
        return 1
    app = create_app(engine)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.log_level == "debug",
        timeout_graceful_shutdown=5,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
