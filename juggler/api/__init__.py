"""Wire formats shared by the router and the engine: OpenAI request bodies and SSE framing.

Both processes validate a request with the same models, so they can never disagree on
what is a valid body (the router validates before it loads anything; the engine
validates again because it is also reachable on its own port)."""
