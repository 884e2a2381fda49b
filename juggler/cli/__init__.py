"""Thin commands: parse, then call the HTTP API or start the server."""
