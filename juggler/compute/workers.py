"""How many engine workers (llama.cpp contexts) a backend runs when `workers` is 0 (auto).

Pure. Seed 003 runs one model with N workers, each owning one context; issue 47 measured
what a second one buys where the device is fast for the model (a small model, or one on
a GPU): each worker decodes its own streams, so while one is in `llama_decode` the other
samples, turns tokens into text and hands them to the event loop; each context's
attention covers only its own streams' cells; and with two busy workers on the CPU each
decodes on its own core(s) instead of two threads meeting at every operation's barrier.
Where weights dominate (a large model on the CPU), a second context would read every
weight twice a step for the same streams: one worker.

The compute plan's governor still gives a lone busy worker every thread of the backend
(`engine.threads`), so one stream decodes as fast as before.
"""

from __future__ import annotations

#: Largest model file that gets a second worker on the CPU (SmolLM2-135M is 0.14 GB,
#: Gemma 3 270M 0.25 GB, a 1B model at Q8_0 about 1.1 GB).
SMALL_MODEL_BYTES = 1 << 30
#: Workers an automatic backend runs at most.
AUTO_WORKERS = 2


def auto_workers(model_bytes: int | None, *, is_llm: bool, offloaded: bool, cores: int) -> int:
    """The workers of a backend whose `workers` setting is 0 (see the module doc):
    `AUTO_WORKERS` for a text model that is offloaded or small (`model_bytes`, its file)
    on a backend with at least two cores, else one."""
    if not is_llm or cores < 2:
        return 1
    small = model_bytes is not None and model_bytes <= SMALL_MODEL_BYTES
    return AUTO_WORKERS if offloaded or small else 1


def workers_for(
    requested: int, model_bytes: int | None, *, is_llm: bool, offloaded: bool, cores: int
) -> int:
    """`requested` workers, or the automatic count when it is 0."""
    if requested > 0:
        return requested
    return auto_workers(model_bytes, is_llm=is_llm, offloaded=offloaded, cores=cores)
