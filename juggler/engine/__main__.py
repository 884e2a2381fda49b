"""`python -m juggler.engine`: the backend process for one model.

Parses the command line: the identity flags are declared here, the engine flags come
from `juggler.options.EngineFlags` (their one declaration, shared with the manager that
writes them). Unknown arguments and invalid values exit 2 with a message that names the
flag. Then it loads the model on the main thread (a bad file exits 1 with a message on
stderr) and only then starts uvicorn, so the port does not listen until the model is
loaded; the workers and the master start in the app's lifespan, after which /health
answers 200.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from pydantic import ValidationError

from juggler.engine_args import field_type
from juggler.options import EngineFlags, flag_of
from juggler.types import ModelType


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m juggler.engine", description="Juggler's llama.cpp backend for one model"
    )
    p.add_argument("--model-path", required=True)
    p.add_argument("--model-name", required=True)
    p.add_argument("--mmproj", default=None, help="a vision projector GGUF for the model")
    p.add_argument(
        "--mmproj-optional",
        action="store_true",
        help="load the model without the projector when llama.cpp refuses it",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--type", choices=["llm", "embedding", "reranking"], default="llm")
    p.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    for name, info in EngineFlags.model_fields.items():
        kind, choices = field_type(info)
        p.add_argument(
            flag_of(name),
            dest=name,
            type=kind,
            choices=choices,
            default=info.default,
            help=info.description,
        )
    return p


def engine_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> EngineFlags:
    """The validated engine flags; an invalid value exits 2 naming its flag."""
    try:
        return EngineFlags.model_validate({n: getattr(args, n) for n in EngineFlags.model_fields})
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else "?"
        parser.error(f"{flag_of(name)}: {err['msg']}")


#: How long a thread may hold the GIL while another asks for it (Python's default: 5 ms).
SWITCH_INTERVAL_S = 0.001


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    flags = engine_flags(parser, args)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    from juggler.accel.library import MTMD_PATH_ENV, projector_library_dir

    # llama-cpp-python loads libmtmd from its own package unless told otherwise, also when
    # libllama comes from a build of one's own (LLAMA_CPP_LIB_PATH): point it at that
    # build's, before the engine's modules import llama_cpp.mtmd_cpp.
    mtmd = projector_library_dir()
    if mtmd is not None:
        os.environ[MTMD_PATH_ENV] = str(mtmd)

    import uvicorn

    from juggler.backend_key import BACKEND_KEEP_ALIVE_S
    from juggler.engine.engine_config import EngineConfig
    from juggler.engine.http.server import create_app
    from juggler.engine.llama.native import Model, init_backend
    from juggler.engine.runtime import Engine
    from juggler.errors import JugglerError

    # The workers and the event loop hand the GIL to each other every token; by default a
    # thread may keep it 5 ms while another waits, longer than a token takes where the
    # device is fast (issue 47: 1 ms against 5 ms, one stream streamed, 1.14x, the
    # median of six interleaved rounds on a busy machine; plain and eight streams even).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    init_backend(verbose=args.log_level == "debug")
    config = EngineConfig(
        model_path=args.model_path,
        model_name=args.model_name,
        type=ModelType(args.type),
        flags=flags,
        mmproj=args.mmproj,
        mmproj_optional=args.mmproj_optional,
    )
    try:
        model = Model(
            config.model_path, n_gpu_layers=flags.n_gpu_layers, use_mmap=flags.mmap == "on"
        )
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
        # The router keeps its connections to the backend open (router.core.backend_http).
        timeout_keep_alive=BACKEND_KEEP_ALIVE_S,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
