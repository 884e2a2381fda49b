"""The OpenAI face, under /v1 and /api/v1: `routes` (models, chat completions,
completions, embeddings, rerank, detokenize), `responses` (the Responses API: a stored
response lives on the backend that made it), `sessions` (Juggler's sessions: one backend
holds a session's KV for its whole life).

Its bodies are `juggler/api/openai.py` and `juggler/api/responses.py`, shared with the
engine, which speaks the same API: the OpenAI body is the canonical request every face
turns its requests into, so this face forwards bodies as they come (Lemonade's load
options on a body are taken out first: `core/load_options.py`).
"""
