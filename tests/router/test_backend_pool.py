"""The router's keep-alive client to its backends (`router/core/backend_http.py`): idle
connections are reused, and connections the backend closed while they were idle (a
restarted or killed backend, a keep-alive timeout) never fail a request."""

from __future__ import annotations

import asyncio

from juggler.router.core.backend_http import BackendPool


class Backend:
    """A loopback HTTP/1.1 server answering every request with a small JSON body on a
    keep-alive connection; `drop_all` closes every open connection at once."""

    def __init__(self) -> None:
        self.writers: list[asyncio.StreamWriter] = []
        self.connections = 0
        #: Connections that close, unanswered, on their next request.
        self.poisoned: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head or writer in self.poisoned:
                    writer.close()
                    return
                body = b'{"ok":true}'
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    def drop_all(self) -> None:
        """Close every connection; the client's side learns of it only when its event
        loop next reads them (as with a backend killed a moment ago)."""
        for w in self.writers:
            w.close()
        self.writers.clear()

    def poison_all(self) -> None:
        """Every open connection closes on its next request without an answer (a
        backend that went away between two requests, as the client learns it)."""
        self.poisoned.update(self.writers)

    async def stop(self) -> None:
        self.drop_all()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def get(pool: BackendPool, url: str) -> bytes:
    r = await pool.request("GET", url + "/x")
    try:
        assert r.status_code == 200
        return await r.aread()
    finally:
        await r.aclose()


def test_idle_connections_are_reused_and_dead_ones_replaced() -> None:
    async def main() -> None:
        backend = Backend()
        url = await backend.start()
        pool = BackendPool()
        try:
            # Two requests in flight at once leave two idle connections in the pool.
            assert await asyncio.gather(get(pool, url), get(pool, url)) == [b'{"ok":true}'] * 2
            assert backend.connections == 2
            assert await get(pool, url) == b'{"ok":true}'
            assert backend.connections == 2  # reused, not a third
            # The backend closes both idle connections (a restart): the next request
            # must not fail on the first dead one, nor on the second.
            backend.drop_all()
            assert await get(pool, url) == b'{"ok":true}'
            assert backend.connections == 3
            # Both idle connections go away only as they are used.
            assert await asyncio.gather(get(pool, url), get(pool, url)) == [b'{"ok":true}'] * 2
            backend.poison_all()
            assert await get(pool, url) == b'{"ok":true}'
        finally:
            pool.close()
            await backend.stop()

    asyncio.run(main())
