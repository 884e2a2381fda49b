"""A worker's pure decisions about KV room: admit, wait or refuse.

No I/O, no clock, no logging: the worker reads its numbers, asks here, and carries the
answer out.

Context overflow policy (the README quotes this). No silent truncation, no whole-cache
clear, no dropping of a live session's KV:
- Each sequence holds at most `--ctx-size` tokens. A prompt or a session input that would
  not fit is refused with 400 `context_length_exceeded`; a generation that reaches the end
  of its sequence stops with finish_reason "length".
- The worker's sequences share `--ctx-size` KV cells (unified KV). Cached sequences of
  finished stateless requests are evicted, least recently used first, whenever cells are
  needed. New work that does not fit in the cells that live sessions leave free is
  refused up front with 400 `context_length_exceeded` (session /input and /generate; a
  stateless request instead waits while other generations run, since they free cells).
- If running generations still exhaust the cells, the generations that cannot get a cell
  end with a `context_length_exceeded` error event; their sessions keep their KV.
Idle sessions are never ended behind the client's back: end them (DELETE) to free their
cells. But an idle session may be *parked* (`park_victim`): when every sequence is held and
work needs one, the least recently used idle session's KV moves to host memory and comes
back on its next input, so idle sessions never make other requests wait.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from juggler.engine.worker.session import Session, SessionState
from juggler.errors import ContextOverflow


class Admission(enum.Enum):
    ADMIT = "admit"
    #: Running generations will finish and free cells: try again next tick.
    WAIT = "wait"
    REFUSE = "refuse"


def admit_stateless(
    *, live_cells: int, num_prompt: int, n_ctx: int, is_generating: bool
) -> Admission:
    """A stateless request needs its prompt plus one generated token in the cells that
    live sequences leave free (cached ones are evicted on demand). If they do not, it
    waits while other generations run (they free cells), else it is refused."""
    if live_cells + num_prompt + 1 <= n_ctx:
        return Admission.ADMIT
    return Admission.WAIT if is_generating else Admission.REFUSE


def park_victim(sessions: Iterable[Session], *, keep: Session | None = None) -> Session | None:
    """The session to park so that a sequence frees up: the least recently used idle API
    session holding one (never `keep`, the session asking); None if every sequence is
    generating or belongs to a stateless request."""
    idle = [
        s
        for s in sessions
        if s is not keep
        and s.has_seq
        and not s.is_ephemeral
        and s.state is SessionState.IDLE
        and s.generation is None
    ]
    return min(idle, key=lambda s: s.last_used, default=None)


def room_error(
    *, held: int, num_new: int, live_cells: int, n_ctx: int, n_cells: int | None = None
) -> ContextOverflow | None:
    """Why `num_new` more tokens do not fit, or None: a sequence holding `held` tokens
    may not reach `n_ctx` (--ctx-size), and the cells that live sessions share may not
    reach the worker's `n_cells` (--kv-cells; `n_ctx` when None; cached sequences count
    as free: they are evicted on demand)."""
    cells = n_ctx if n_cells is None else n_cells
    if held + num_new >= n_ctx:
        return ContextOverflow(overflow_message(held + num_new, n_ctx))
    if live_cells + num_new >= cells:
        return ContextOverflow(full_message(live_cells, num_new, cells))
    return None


def overflow_message(num_tokens: int, n_ctx: int) -> str:
    return (
        f"this request needs {num_tokens} tokens but the context holds {n_ctx} "
        "per sequence (--ctx-size)"
    )


def full_message(live_cells: int, num_new: int, n_ctx: int) -> str:
    return (
        f"the KV cache is full: live sessions hold {live_cells} of {n_ctx} cells and this "
        f"request needs {num_new} more; end idle sessions or raise kv_cells"
    )
