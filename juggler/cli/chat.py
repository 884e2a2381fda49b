"""`juggler run`'s parts that need no terminal: the multi-line rule, the sampling
options `/set` takes, and a chat on the server's session API.

A `ChatSession` keeps one server session for the conversation, so each turn sends (and
the backend prefills) only that turn. It also remembers the messages, so that when the
session is gone (its model was unloaded, its backend restarted) a new one is opened with
the whole conversation and the chat goes on.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from juggler.cli.client import Client, ServerError

#: What `/set NAME VALUE` takes, and how its value is read. `max_tokens` is sent as the
#: session API's `max_new_tokens`; `stop` takes one or more words.
OPTIONS: dict[str, type] = {
    "temperature": float,
    "top_p": float,
    "top_k": int,
    "min_p": float,
    "seed": int,
    "max_tokens": int,
    "repeat_penalty": float,
    "presence_penalty": float,
    "frequency_penalty": float,
    "stop": list,
    "ignore_eos": bool,
}
FENCE = '"""'


def parse_option(name: str, value: str) -> Any:
    """The value of option `name` read from `value`; ValueError says what is wrong."""
    kind = OPTIONS.get(name)
    if kind is None:
        raise ValueError(f"unknown option {name!r}; options: {', '.join(OPTIONS)}")
    value = value.strip()
    if not value:
        raise ValueError(f"/set {name} needs a value")
    if kind is bool:
        if value.lower() not in ("true", "false", "on", "off", "1", "0"):
            raise ValueError(f"{name} is true or false, not {value!r}")
        return value.lower() in ("true", "on", "1")
    if kind is list:
        return value.split()
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"{name} must be {'an integer' if kind is int else 'a number'}") from None


def read_message(read: Callable[[str], str], prompt: str = ">>> ", more: str = "... ") -> str:
    """One message from `read` (e.g. `input`): a line, or, when it starts with \"\"\", every
    line up to one that ends with \"\"\" (the fences are not part of the message)."""
    first = read(prompt)
    stripped = first.strip()
    if not stripped.startswith(FENCE):
        return first
    body = stripped[len(FENCE) :]
    if body.endswith(FENCE):
        return body[: -len(FENCE)].strip()
    lines = [body]
    while True:
        line = read(more)
        if line.rstrip().endswith(FENCE):
            lines.append(line.rstrip()[: -len(FENCE)])
            return "\n".join(lines).strip("\n")
        lines.append(line)


def generate_body(options: dict[str, Any]) -> dict[str, Any]:
    """The session API's generate body for the options set with /set."""
    body = dict(options)
    if "max_tokens" in body:
        body["max_new_tokens"] = body.pop("max_tokens")
    return body


@dataclass
class Answer:
    text: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    #: Seconds from the request to the first text, and to the end.
    first_text_s: float | None = None
    total_s: float = 0.0

    def tokens_per_s(self) -> float | None:
        tokens = int(self.usage.get("completion_tokens") or 0)
        if self.first_text_s is None or tokens < 2 or self.total_s <= self.first_text_s:
            return None
        return (tokens - 1) / (self.total_s - self.first_text_s)


class ChatSession:
    """A conversation with `model` on a running server (synchronous; the CLI's thread)."""

    def __init__(self, client: Client, model: str, system: str | None = None) -> None:
        self.client = client
        self.model = model
        self.system = system
        self.session_id: str | None = None
        self.messages: list[dict[str, str]] = []

    def open(self) -> None:
        """Start a session (loads the model if it is not loaded; blocks until then)."""
        created = self.client.post("/api/v1/sessions", {"model": self.model})
        self.session_id = str(created["session_id"])

    def _path(self, action: str = "") -> str:
        return f"/api/v1/sessions/{self.session_id}" + (f"/{action}" if action else "")

    def _send(self, turn: dict[str, str]) -> None:
        """Send the user's turn; on a new session, the whole conversation before it."""
        is_new = self.session_id is None
        if is_new:
            self.open()
        head = [{"role": "system", "content": self.system}] if self.system else []
        before = self.messages if is_new else []
        first = head if not self.messages or is_new else []
        try:
            self.client.post(self._path("input"), {"messages": [*first, *before, turn]})
        except ServerError as exc:
            if exc.code != "session_not_found" or is_new:
                raise
            self.session_id = None
            self._send(turn)

    def ask(self, text: str, options: dict[str, Any], on_text: Callable[[str], None]) -> Answer:
        """Send `text`, stream the answer to `on_text` as it comes, and return it whole.
        A KeyboardInterrupt while it streams stops the generation (the session keeps what
        was said) and is raised again."""
        started = time.monotonic()
        turn = {"role": "user", "content": text}
        self._send(turn)
        self.messages.append(turn)
        answer = Answer()
        try:
            for _, event in self.client.events(self._path("generate"), generate_body(options)):
                if "error" in event:
                    err = event["error"]
                    raise ServerError(502, str(err.get("message", err)), err.get("code"))
                if event.get("text"):
                    if answer.first_text_s is None:
                        answer.first_text_s = time.monotonic() - started
                    answer.text += event["text"]
                    on_text(event["text"])
                if event.get("done"):
                    answer.finish_reason = event.get("finish_reason")
                    answer.usage = event.get("usage") or {}
        except KeyboardInterrupt:
            self.cancel()
            answer.finish_reason = "cancelled"
            raise
        finally:
            answer.total_s = time.monotonic() - started
            self.messages.append({"role": "assistant", "content": answer.text})
        return answer

    def cancel(self) -> None:
        if self.session_id is not None:
            with contextlib.suppress(ServerError, httpx.TransportError):
                self.client.post(self._path("cancel"), {})

    def clear(self) -> None:
        """Forget the conversation: end the session and start a new one."""
        self.close()
        self.messages = []
        self.open()

    def close(self) -> None:
        if self.session_id is not None:
            with contextlib.suppress(ServerError):  # else it is gone with its backend
                self.client.delete(self._path())
            self.session_id = None
