"""A small synchronous client of a running Juggler server, for the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

from juggler.config import Settings
from juggler.errors import JugglerError


class ServerError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


class Client:
    def __init__(self, settings: Settings, timeout_s: float = 600.0) -> None:
        host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
        self.base = f"http://{host}:{settings.port}"
        headers = {}
        # The admin key, when the config file holds one, works wherever the API key does:
        # the owner's CLI may then also register files and change settings (issue 22).
        key = settings.admin_api_key or settings.api_key
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self.admin_key = settings.admin_api_key
        self.http = httpx.Client(base_url=self.base, headers=headers, timeout=timeout_s)

    def _check(self, response: httpx.Response) -> Any:
        try:
            data = response.json()
        except ValueError:
            data = {}
        if response.status_code >= 400:
            err = data.get("error", {}) if isinstance(data, dict) else {}
            message = err.get("message") if isinstance(err, dict) else None
            code = err.get("code") if isinstance(err, dict) else None
            raise ServerError(response.status_code, message or response.text, code)
        return data

    def get(self, path: str) -> Any:
        return self._check(self.http.get(path))

    def delete(self, path: str) -> Any:
        return self._check(self.http.delete(path))

    def events(self, path: str, body: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        """POST and read the answer's server-sent events as (event name, parsed data), up
        to OpenAI's `[DONE]`. Blocks while the server is silent; raises ServerError for an
        error answer."""
        with self.http.stream("POST", path, json=body) as response:
            if response.status_code >= 400:
                response.read()
                self._check(response)
            name = "message"
            for line in response.iter_lines():
                if line.startswith("event:"):
                    name = line.removeprefix("event:").strip()
                elif line.startswith("data:"):
                    payload = line.removeprefix("data:").strip()
                    if payload == "[DONE]":
                        return
                    yield name, json.loads(payload)
                    name = "message"

    def post(self, path: str, body: dict[str, Any], *, admin: bool = False) -> Any:
        headers = {}
        if admin and self.admin_key:
            headers["Authorization"] = f"Bearer {self.admin_key}"
        return self._check(self.http.post(path, json=body, headers=headers))


__all__ = ["Client", "JugglerError", "ServerError"]
