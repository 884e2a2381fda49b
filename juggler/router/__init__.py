"""The front process: one FastAPI app (`app.py`) with one package per face of the server
over one core package.

- `openai/`: OpenAI's API (models, chat, completions, embeddings, rerank, the Responses
  API, sessions), under /v1 and /api/v1;
- `ollama/`: Ollama's API under /api; `anthropic/`: Anthropic's Messages API;
- `lemonade/`: Lemonade's management API (pull, load, unload, pins, options, config,
  health, stats, logs, system-info, llama.cpp's routes) and its /internal routes;
- `gateway/`: /metrics (vLLM's and Lemonade's families) and the LoRA adapter routes;
- `dashboard/`: the web page and its files;
- `core/`: what they share: middleware, security, request bodies, the proxy to the
  backends and the router's state. It imports no face, and no face imports another
  (tests/router/test_layout.py): a face that speaks another dialect turns its requests
  into the OpenAI body every backend speaks and the backend's answer back into its own
  shape (its `request` and `answer` modules).
"""
