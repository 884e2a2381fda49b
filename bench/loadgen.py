"""A light HTTP/1.1 load generator for the throughput benches: asyncio streams (uvloop when
installed), keep-alive connections, one request at a time per connection, and no HTTP
library per chunk. On these 2-core machines the client shares the cores with the
servers it measures, so it must cost little per streamed chunk: httpx with a thread per
stream took about a third of a core at 64 streams (bench_engine.py's benchmark 5).

Each of `streams` connections posts `requests` bodies one after another; the result is
the tokens generated (from `usage` when not streamed, from the streamed events' count
otherwise, checked against `usage` when the server sends it) over the wall time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


class LoadError(Exception):
    pass


@dataclass
class Burst:
    tokens: int
    seconds: float
    requests: int

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


class _Conn:
    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self.host, self.port = host, port
        self.headers = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.reader is None or self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self.reader, self.writer

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def post(self, path: str, body: bytes, on_event: Callable[[bytes], None]) -> bytes:
        """POST `body`; returns the whole body of a plain answer, or b"" for an SSE one
        (whose `data:` payloads go to `on_event` as they come)."""
        for attempt in (1, 2):
            reader, writer = await self._open()
            head = (
                f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{self.headers}"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            writer.write(head.encode() + body)
            try:
                status_line = await reader.readline()
            except ConnectionError:
                status_line = b""
            if not status_line:  # a kept-alive connection the server had closed
                self.close()
                if attempt == 1:
                    continue
                raise LoadError("the server closed the connection")
            return await self._answer(status_line, reader, on_event)
        raise AssertionError("unreachable")

    async def _answer(
        self, status_line: bytes, reader: asyncio.StreamReader, on_event: Callable[[bytes], None]
    ) -> bytes:
        status = int(status_line.split()[1])
        length, chunked, close, sse = -1, False, False, False
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value:
                chunked = True
            elif name == "connection" and value == "close":
                close = True
            elif name == "content-type" and value.startswith("text/event-stream"):
                sse = True
        if chunked:
            parts = []
            buffer = b""
            while True:
                size = int((await reader.readline()).split(b";")[0], 16)
                data = await reader.readexactly(size + 2)
                if size == 0:
                    break
                if sse:
                    buffer += data[:-2]
                    *events, buffer = buffer.split(b"\n\n")
                    for ev in events:
                        if ev.startswith(b"data: "):
                            on_event(ev[6:])
                else:
                    parts.append(data[:-2])
            content = b"".join(parts)
        elif length >= 0:
            content = await reader.readexactly(length)
        else:
            content = await reader.read()
            close = True
        if close:
            self.close()
        if status != 200:
            raise LoadError(f"HTTP {status}: {content[:300]!r}")
        if sse and not chunked:
            for ev in content.split(b"\n\n"):
                if ev.startswith(b"data: "):
                    on_event(ev[6:])
            return b""
        return b"" if sse else content


def _streamed_tokens() -> tuple[Callable[[bytes], None], Callable[[], int]]:
    """An SSE event counter: text events, and `usage.completion_tokens` if one came."""
    seen = {"events": 0, "usage": -1, "done": 0}

    def on_event(data: bytes) -> None:
        if data == b"[DONE]":
            seen["done"] = 1
            return
        obj = json.loads(data)
        usage = obj.get("usage")
        if usage:
            seen["usage"] = int(usage["completion_tokens"])
        choices = obj.get("choices") or []
        if choices and (choices[0].get("text") or (choices[0].get("delta") or {}).get("content")):
            seen["events"] += 1

    def tokens() -> int:
        if not seen["done"]:
            raise LoadError("the stream ended without data: [DONE]")
        return seen["usage"] if seen["usage"] >= 0 else seen["events"]

    return on_event, tokens


async def _run(
    url: str,
    path: str,
    bodies: list[list[dict[str, Any]]],
    headers: dict[str, str],
) -> Burst:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80

    async def one_stream(mine: list[dict[str, Any]]) -> int:
        conn = _Conn(host, port, headers)
        total = 0
        try:
            for body in mine:
                on_event, tokens = _streamed_tokens()
                content = await conn.post(path, json.dumps(body).encode(), on_event)
                if body.get("stream"):
                    total += tokens()
                else:
                    total += int(json.loads(content)["usage"]["completion_tokens"])
        finally:
            conn.close()
        return total

    t0 = time.perf_counter()
    counts = await asyncio.gather(*(one_stream(m) for m in bodies))
    took = time.perf_counter() - t0
    return Burst(sum(counts), took, sum(len(m) for m in bodies))


def run_burst(
    url: str,
    path: str,
    bodies: list[list[dict[str, Any]]],
    headers: dict[str, str] | None = None,
) -> Burst:
    """`bodies[i]` is what stream i posts, one after another; all streams start at once."""
    runner: Any = asyncio.run
    with contextlib.suppress(ImportError):
        import uvloop

        runner = uvloop.run
    result: Burst = runner(_run(url, path, bodies, headers or {}))
    return result
