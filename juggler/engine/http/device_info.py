"""/health's account of where the model runs, from what llama.cpp reports (issue 48):
"`device` and the offloaded layer count come from what llama.cpp reports", and "the
backend reports what llama.cpp actually placed on each device".

- `device`: gpu when llama.cpp offloaded at least one layer, else cpu;
- `offload`: the layers offloaded and of how many (`native.offloaded_layers`);
- `vram_bytes`: llama.cpp's buffers on GPU devices (the model's, and each worker's KV,
  compute and output buffers as their contexts were made), and per device;
- `devices` and `backends`: ggml's registry of the library this process loaded, and
  `library`: that library's path.
"""

from __future__ import annotations

from typing import Any

from juggler.engine.llama import devices
from juggler.engine.llama.native import Model, offloaded_layers
from juggler.engine.runtime import Engine


def device_body(engine: Engine) -> dict[str, Any]:
    """The device part of /health (read on the event loop; cheap)."""
    model = engine.model if isinstance(engine.model, Model) else None
    snaps = engine.worker_snapshots()
    num_offloaded = offloaded_layers(model) if model is not None else 0
    per_device: dict[str, int] = dict(model.placement.by_device()) if model is not None else {}
    for snap in snaps:
        for name, n in snap.context_devices:
            per_device[name] = per_device.get(name, 0) + n
    return {
        "device": "gpu" if num_offloaded > 0 else "cpu",
        "offload": {
            "layers": num_offloaded,
            "of": model.num_layers if model is not None else 0,
        },
        "vram_bytes": sum(per_device.values()),
        "vram_by_device": per_device,
        "devices": [d.as_json() for d in devices.devices()] if model is not None else [],
        "backends": devices.backends() if model is not None else [],
        "library": devices.library_path() if model is not None else "",
    }
