"""What every face of the router shares; it imports no face (tests/router/test_layout.py).

- the request's way in: `middleware` (request ids, API keys, body size),
  `browser_guard` (Host, Origin, content type), `security` (the admin guard's pure
  rules), `connections` (header deadline, connection cap), `bodies` (JSON bodies, a 400
  naming the field), `openapi` (the API document), `error_bodies` (each face's error
  shape, chosen by path);
- the way to a backend: `proxy` (leases, forwarding, disconnects), `relay` (one
  backend stream to one client, and the stream helpers every translating face uses),
  `admission` (a prompt too long for the context is refused first), `drain` (graceful
  shutdown), `load_options` (Lemonade's load options on an inference body);
- the router's state (`deps.RouterState`): `pins` (pins and saved load options),
  `adapters` (LoRA adapters: routing and in-flight counts), `figures` (the backends'
  figures, polled), `tables` (which backend holds a session or a stored response);
- models as every face shows and installs them: `catalog_view` (a model's entry and
  file facts), `pulls` (downloads as events, and deletes);
- models made by Ollama's create, as every face serves them: `modelfiles` (a Modelfile's
  defaults, kept), `modelfile_requests` (applied to OpenAI and Anthropic requests),
  `prompt_template` with `gotemplate` / `gorender` (a TEMPLATE rendered, Go's syntax).
"""
