"""The backend process for one llama.cpp model (`python -m juggler.engine`).

One model shared by N workers, each owning one llama.cpp context; a master task that
pins each session to a worker; continuous batching, session KV reuse, streaming (seed
003). Nothing outside this package imports it: the router starts it as a process.

Its parts, each a sub-package whose imports only point down this list:

    __main__   the process: command line (identity + `EngineFlags`), model load, uvicorn
    http/      the HTTP face: routes, OpenAI shapes, SSE streaming, /stats and /metrics
    runtime    `Engine`: model, workers and master behind one async API for the routes
    worker/    the threads that own a context: the generation worker and its parts,
               the embedding worker
    schedule/  commands, the master (placement, session -> worker), the pure batch
               plan, and the way results travel back (outbox, streams)
    cache/     pure KV reuse policy for stateless requests, and parked prefixes
    llama/     the llama.cpp boundary: ports, the native bindings, sampling, chat
"""
