"""The wire of a stream handed over from the router to its backend (issue 47): the
header that asks and the one that takes it, the backend's one-word answers, the
messages to its inbox, and the chunk framing both sides write (`router.core.handoff`,
`engine.http.handoff`)."""

from __future__ import annotations

#: Router -> backend: "<token> <ping seconds>"; backend -> router: "accept <inbox path>".
HEADER = "x-juggler-handoff"
ACCEPT = "accept"
#: The backend's answer to the router once the stream is over: written to its end,
#: the client left, ended with the drain's error event, no descriptor came.
DONE, GONE, CUT, LOST = b"done", b"gone", b"cut", b"lost"
#: A message to the backend's inbox (one packet): "fd <token>" with the descriptor,
#: or "cut <token> <message>"; the longest read.
MAX_MESSAGE = 1024


def chunk(data: bytes) -> bytes:
    """`data` (not empty) as one chunk of a chunked HTTP/1.1 body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def address(name: str) -> str:
    """The socket address of an inbox `name` as the backend's head gives it ("@name"):
    Linux's abstract namespace, a leading NUL."""
    return "\0" + name.removeprefix("@")
