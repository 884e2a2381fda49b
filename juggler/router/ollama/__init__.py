"""The Ollama face: Ollama's API under /api (not /api/v1, which is Lemonade's).

- `wire`: its bodies, NDJSON lines and error shape; `messages`: its messages, `format`
  and tool calls as OpenAI's (and the backend's streamed tool calls back);
- the adapter: `request` turns a request into the OpenAI body every backend speaks and
  reads its `options` and `keep_alive` once into one `OllamaRequestOptions` (`options`);
  `answer` turns the backend's stream into Ollama's objects, timed;
- `routes`: chat, generate, embed, embeddings; `residency`: a request's load options and
  keep_alive applied through the manager; `embed` and `embed_rules`: embeddings with
  Ollama's `truncate` and `dimensions`;
- `models`: version, tags, ps, show, pull, delete, copy, push; `create` and `uploads`:
  /api/create and the blob uploads it relies on.
"""
