"""Wire formats shared by the router and the engine: OpenAI's request bodies (chat,
completions, embeddings, sessions, the Responses API), structured output and tools, SSE
framing, the latency histograms.

Both processes validate a request with the same models, so they can never disagree on
what is a valid body (the router validates before it loads anything; the engine
validates again because it is also reachable on its own port). A format only one face of
the router speaks lives in that face's package (`juggler/router/ollama/wire.py`, ...).
"""
