"""The Lemonade face: Lemonade Server's management API under /api/v1 and /v1 (and its
/internal routes), same JSON shapes and error codes.

- `model_routes`: pull (JSON or SSE), register, delete; `admin_routes`: health, stats,
  load, unload, /internal/pin; `model_options`: a model's saved options
  (`/models/{id}/options`); `config_routes`: /internal/config and /internal/set;
  `alias_routes`: /internal/aliases; `memory_routes`: /internal/simulate-vram-pressure;
  `system_routes`: system-info and the refusals of other servers' routes;
  `logs_route`: /logs; `llamacpp_routes`: llama.cpp's /slots and /tokenize;
- `schemas`: the management bodies (the wire format), validated before anything runs.

The OpenAI routes Lemonade serves (/chat/completions, /models, ...) are the OpenAI face's.
"""
