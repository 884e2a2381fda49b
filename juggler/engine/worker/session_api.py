"""What each command does on its worker: create a session, append input, generate,
cancel, end; and stateless requests, from waiting to their start.

`SessionApi` runs on the worker thread. It owns the queue of stateless requests waiting
for a sequence or for KV cells; for everything else it looks the session up in the
`SessionTable`, has `SessionInputs`, `Generations` and `KvBook` do the work, and answers
the command's future through the worker's outbox. A `JugglerError` it raises is the
command's answer (the worker's dispatch rejects the future with it).
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from juggler.engine.cache.prefix_cache import Reuse
from juggler.engine.schedule.messages import (
    AppendInput,
    Cancel,
    Complete,
    CreateSession,
    EndSession,
    Generate,
    Notice,
    RequestDone,
    SessionGone,
)
from juggler.engine.schedule.outbox import Outbox
from juggler.engine.worker.config import Clock
from juggler.engine.worker.generation import Generations
from juggler.engine.worker.inputs import SessionInputs
from juggler.engine.worker.kv import KvBook
from juggler.engine.worker.policy import (
    Admission,
    admit_stateless,
    full_message,
    overflow_message,
)
from juggler.engine.worker.session import Session
from juggler.engine.worker.table import SessionTable
from juggler.errors import BadRequest, Conflict, ContextOverflow, JugglerError, Overloaded


class SessionApi:
    def __init__(
        self,
        table: SessionTable,
        kv: KvBook,
        inputs: SessionInputs,
        gens: Generations,
        outbox: Outbox,
        notify: Callable[[Notice], None],
        clock: Clock,
        worker_id: int = 0,
    ) -> None:
        self.table = table
        self.kv = kv
        self.inputs = inputs
        self.gens = gens
        self.outbox = outbox
        self.notify = notify
        self.clock = clock
        self.worker_id = worker_id
        #: Stateless requests waiting for a sequence or for KV cells.
        self.waiting: collections.deque[Complete] = collections.deque()

    def create(self, cmd: CreateSession) -> None:
        seq = self.kv.take_seq()
        if seq is None:
            self.notify(SessionGone(cmd.session_id, self.worker_id))
            raise Overloaded(
                "every sequence of this backend is held by a live session; "
                "end a session or start the backend with a larger --parallel"
            )
        s = Session(cmd.session_id, seq, last_used=self.clock.tick)
        self.table.add(s)
        self.outbox.resolve(cmd.reply, {"session_id": s.session_id})

    def append(self, cmd: AppendInput) -> None:
        s = self.table.api_session(cmd.session_id)
        if s.generation is not None:
            raise Conflict("the session is generating; cancel it or wait for it to finish")
        num_new = self.inputs.append(s, cmd.text, cmd.messages)
        s.last_used = self.clock.tick
        self.outbox.resolve(
            cmd.reply,
            {"session_id": s.session_id, "n_tokens": num_new, "n_past": s.n_past + len(s.pending)},
        )
        if cmd.messages and cmd.messages[-1].get("role") == "user":
            self.inputs.speculate_header(s)

    def generate(self, cmd: Generate) -> None:
        s = self.table.api_session(cmd.session_id)
        if s.generation is not None:
            raise Conflict("the session is already generating")
        continues, saved = self.inputs.prepare_generate(s)
        if not s.pending and saved is not None:
            # The speculative prefill already produced this turn's logits.
            g = self.gens.begin(s, cmd.params, cmd.sink, cmd.t_arrival)
            self.outbox.resolve(cmd.reply, {"session_id": s.session_id})
            self.gens.on_token(s, g.sampler.sample_logits(saved))
            return
        if not s.pending:
            if not s.tokens:
                raise BadRequest("the session has no input yet; POST /input first")
            # Its logits are gone: decode the last token again.
            last = s.tokens[-1]
            self.kv.rollback(s, s.n_past - 1)
            s.pending.append(last)
        self.gens.begin(s, cmd.params, cmd.sink, cmd.t_arrival, continues_reply=continues)
        self.outbox.resolve(cmd.reply, {"session_id": s.session_id})

    def cancel(self, cmd: Cancel) -> None:
        s = self.table.api_session(cmd.session_id)
        was = s.generation is not None
        if was:
            self.gens.finish(s, "cancelled")
        self.outbox.resolve(cmd.reply, {"session_id": s.session_id, "cancelled": was})

    def end(self, cmd: EndSession) -> None:
        s = self.table.api_session(cmd.session_id)
        if s.generation is not None:
            self.gens.finish(s, "cancelled")
        self.kv.release(s)
        self.notify(SessionGone(s.session_id, self.worker_id))
        self.outbox.resolve(cmd.reply, {"session_id": s.session_id, "deleted": True})

    # -- stateless requests --------------------------------------------------------------
    def admit_waiting(self) -> None:
        """Start waiting stateless requests in order while sequences and cells allow (see
        `policy.admit_stateless`); a request that can never fit is refused."""
        while self.waiting:
            cmd = self.waiting[0]
            reuse = self.kv.reuse_for(cmd.prompt)
            if reuse.key is None:
                return  # every sequence is busy
            live = self.kv.live()
            verdict = admit_stateless(
                live_cells=live,
                num_prompt=len(cmd.prompt),
                n_ctx=self.kv.n_ctx,
                is_generating=self.table.is_generating(),
            )
            if verdict is Admission.WAIT:
                return
            self.waiting.popleft()
            if verdict is Admission.REFUSE:
                error = full_message(live, len(cmd.prompt) + 1, self.kv.n_ctx)
                self.refuse_stateless(cmd, ContextOverflow(error))
            else:
                self.start_stateless(cmd, reuse)

    def start_stateless(self, cmd: Complete, reuse: Reuse) -> None:
        """Start a stateless request on the sequence `reuse` chose, keeping its cached
        prefix; a request that cannot start is answered with its error."""
        s = self.kv.start_ephemeral(cmd.request_id, cmd.prompt, reuse)
        try:
            if len(cmd.prompt) >= self.kv.n_ctx:
                raise ContextOverflow(overflow_message(len(cmd.prompt), self.kv.n_ctx))
            self.gens.begin(s, cmd.params, cmd.sink, cmd.t_arrival)
        except JugglerError as exc:
            self.kv.release(s)
            self.refuse_stateless(cmd, exc)
            return
        self.outbox.resolve(cmd.reply, {"session_id": s.session_id})

    def refuse_stateless(self, cmd: Complete, error: JugglerError) -> None:
        self.outbox.reject(cmd.reply, error)
        self.notify(RequestDone(cmd.request_id, self.worker_id))
