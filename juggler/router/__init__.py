"""The front process: FastAPI app, OpenAI/Lemonade/admin routes, proxy to backends."""
