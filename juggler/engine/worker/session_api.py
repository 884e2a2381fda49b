"""What each command does on its worker: create a session, append input, generate,
cancel, end; and stateless requests, from waiting to their start.

`SessionApi` runs on the worker thread. It owns the queue of stateless requests waiting
for a sequence or for KV cells; for everything else it looks the session up in the
`SessionTable`, has `SessionInputs`, `Generations` and `KvBook` do the work, and answers
the command's future through the worker's outbox. A `JugglerError` it raises is the
command's answer (the worker's dispatch rejects the future with it).
"""

from __future__ import annotations

from collections.abc import Callable

from juggler.engine.cache.prefix_cache import Reuse
from juggler.engine.schedule.messages import (
    AdapterRef,
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
from juggler.engine.worker.adapters import AdapterSet, busy_adapters
from juggler.engine.worker.config import MAX_WAITING, QUEUE_TIMEOUT_S, Clock
from juggler.engine.worker.generation import Generations
from juggler.engine.worker.inputs import SessionInputs
from juggler.engine.worker.kv import KvBook
from juggler.engine.worker.pending import PendingGenerates, WaitingRequests
from juggler.engine.worker.policy import (
    Admission,
    admit_stateless,
    full_message,
    overflow_message,
    park_victim,
)
from juggler.engine.worker.session import NO_SEQ, Session
from juggler.engine.worker.table import SessionTable
from juggler.errors import (
    BadRequest,
    Conflict,
    ContextOverflow,
    JugglerError,
    SessionNotFound,
    TooManyRequests,
)


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
        adapters: AdapterSet,
        worker_id: int = 0,
        *,
        max_waiting: int = MAX_WAITING,
        queue_timeout_s: float = QUEUE_TIMEOUT_S,
    ) -> None:
        self.adapters = adapters
        self.table = table
        self.kv = kv
        self.inputs = inputs
        self.gens = gens
        self.outbox = outbox
        self.notify = notify
        self.clock = clock
        self.worker_id = worker_id
        self.max_waiting = max_waiting
        self.queue_timeout_s = queue_timeout_s
        #: Stateless requests waiting for a sequence or for KV cells, and since when.
        self.waiting = WaitingRequests()
        #: Session generates waiting for a sequence.
        self.pending = PendingGenerates()

    def create(self, cmd: CreateSession) -> None:
        """A new session on a free sequence (parking the least recently used idle session
        if every sequence is held); if all are generating, it starts parked and takes a
        sequence on its first input. A session with a LoRA adapter loads it now if there
        is room (a file that does not fit the model is refused here)."""
        if self.adapters.can_serve(cmd.adapter, self._busy()):
            self.adapters.load(cmd.adapter, self._busy())
        seq = self._free_seq()
        s = Session(
            cmd.session_id,
            NO_SEQ if seq is None else seq,
            last_used=self.clock.tick,
            adapter=cmd.adapter,
        )
        self.table.add(s)
        self.outbox.resolve(cmd.reply, {"session_id": s.session_id})

    def _free_seq(self, keep: Session | None = None) -> int | None:
        """A sequence id nobody holds: free, else a cached one's, else the least recently
        used idle session's, parked for it; None when every sequence is generating."""
        seq = self.kv.take_seq()
        if seq is None:
            victim = park_victim(self.table.values(), keep=keep)
            if victim is not None:
                self.inputs.drop_speculation(victim)
                self.kv.park_session(victim)
                seq = self.kv.take_seq()
        return seq

    def _busy(self) -> set[str]:
        return busy_adapters(self.table.values())

    def _unpark(self, s: Session) -> bool:
        """Give a parked session a sequence back (and its KV); False when every sequence
        is generating (appended input then waits as pending input of the parked session,
        a generate waits in `pending`)."""
        if s.has_seq:
            return True
        seq = self._free_seq(keep=s)
        if seq is None:
            return False
        self.kv.unpark_session(s, seq)
        return True

    def append(self, cmd: AppendInput) -> None:
        s = self.table.api_session(cmd.session_id)
        if s.generation is not None or self.pending.has(s.session_id):
            raise Conflict("the session is generating; cancel it or wait for it to finish")
        self._unpark(s)
        tools = list(cmd.tools) if cmd.tools is not None else None
        num_new = self.inputs.append(s, cmd.text, cmd.messages, tools, cmd.header_suffix)
        s.last_used = self.clock.tick
        self.outbox.resolve(
            cmd.reply,
            {"session_id": s.session_id, "n_tokens": num_new, "n_past": s.n_past + len(s.pending)},
        )
        if cmd.messages and cmd.messages[-1].get("role") == "user":
            self.inputs.speculate_header(s)

    def generate(self, cmd: Generate) -> None:
        s = self.table.api_session(cmd.session_id)
        if s.generation is not None or self.pending.has(s.session_id):
            raise Conflict("the session is already generating")
        if not self._unpark(s) or not self.adapters.load(s.adapter, self._busy()):
            self._check_room_to_wait()
            self.pending.add(cmd, self.clock.now())
            return  # answered when a sequence frees up (see admit_waiting)
        self._start_generate(s, cmd)

    def _start_generate(self, s: Session, cmd: Generate) -> None:
        continues, saved = self.inputs.prepare_generate(s)
        if not s.pending and saved is not None:
            # The speculative prefill already produced this turn's logits.
            g = self.gens.begin(s, cmd.params, cmd.sink, cmd.t_arrival)
            self.outbox.resolve(cmd.reply, {"session_id": s.session_id})
            self.gens.on_sampled(s, g.sampler.sample_logits(saved), lambda: saved)
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
        waiting = self.pending.remove(s.session_id)
        if waiting is not None:
            was = True
            self.outbox.reject(
                waiting.reply, Conflict("the generate was cancelled before it began")
            )
        self.outbox.resolve(cmd.reply, {"session_id": s.session_id, "cancelled": was})

    def end(self, cmd: EndSession) -> None:
        s = self.table.api_session(cmd.session_id)
        waiting = self.pending.remove(s.session_id)
        if waiting is not None:
            self.outbox.reject(waiting.reply, SessionNotFound("the session was ended"))
        if s.generation is not None:
            self.gens.finish(s, "cancelled")
        self.kv.release(s)
        self.notify(SessionGone(s.session_id, self.worker_id))
        self.outbox.resolve(cmd.reply, {"session_id": s.session_id, "deleted": True})

    # -- stateless requests --------------------------------------------------------------
    def admit_waiting(self) -> None:
        """Start waiting stateless requests in order while sequences and cells allow (see
        `policy.admit_stateless`), parking idle sessions for a sequence; a request that
        can never fit is refused, one whose client left is dropped, and one that waited
        `queue_timeout_s` is answered 429.

        A request whose LoRA adapter cannot be loaded (every adapter slot busy) waits;
        requests behind it may pass only if they need no adapter, so adapters take
        turns in arrival order and none starves."""
        if not self.waiting and not self.pending:
            return  # nothing waits (every tick of a running generation asks)
        self._expire_waiting()
        self._admit_generates()
        i = 0
        adapter_blocked = False
        while i < len(self.waiting):
            cmd = self.waiting[i]
            if cmd.adapter is not None and (
                adapter_blocked or not self.adapters.can_serve(cmd.adapter, self._busy())
            ):
                adapter_blocked = True
                i += 1
                continue
            reuse = self.kv.reuse_for(cmd.prompt, cmd.adapter.adapter_id if cmd.adapter else None)
            if reuse.key is None:
                victim = park_victim(self.table.values())
                if victim is None:
                    return  # every sequence is generating: one ends soon
                self.inputs.drop_speculation(victim)
                self.kv.park_session(victim)
                continue
            live = self.kv.live()
            verdict = admit_stateless(
                live_cells=live,
                num_prompt=len(cmd.prompt),
                n_ctx=self.kv.n_ctx,
                is_generating=self.table.is_generating(),
            )
            if verdict is Admission.WAIT:
                return
            self.waiting.pop(i)
            if verdict is Admission.REFUSE:
                error = full_message(live, len(cmd.prompt) + 1, self.kv.n_ctx)
                self.refuse_stateless(cmd, ContextOverflow(error))
            else:
                self.start_stateless(cmd, reuse)

    def _admit_generates(self) -> None:
        """Start waiting session generates in order while sequences free up."""
        gone, late = self.pending.take_expired(self.clock.now(), self.queue_timeout_s)
        for g in gone:
            self.outbox.reject(g.reply, JugglerError("the client went away"))
        for g in late:
            self.outbox.reject(g.reply, self._timed_out())
        while (cmd := self.pending.first()) is not None:
            s = self.table.get(cmd.session_id)
            if s is None or s.is_ephemeral:
                self.pending.pop()
                self.outbox.reject(
                    cmd.reply, SessionNotFound(f"session not found: {cmd.session_id}")
                )
                continue
            if not self._unpark(s) or not self.adapters.load(s.adapter, self._busy()):
                return  # every sequence is still generating, or every adapter slot busy
            self.pending.pop()
            try:
                self._start_generate(s, cmd)
            except JugglerError as exc:
                self.outbox.reject(cmd.reply, exc)

    def reject_all(self, error: JugglerError) -> None:
        """The worker died: refuse everything that waits."""
        for waiting in self.waiting.drain():
            self.outbox.reject(waiting.reply, error)
        for cmd in self.pending.drain():
            self.outbox.reject(cmd.reply, error)

    def _timed_out(self, adapter: AdapterRef | None = None) -> TooManyRequests:
        if adapter is not None and not self.adapters.is_loaded(adapter):
            what = (
                f"LoRA adapter {adapter.adapter_id!r} could not be loaded (all "
                f"{self.adapters.max_active} adapter slots were in use)"
            )
        else:
            what = "no sequence of this backend was free"
        return TooManyRequests(
            f"{what} for {self.queue_timeout_s:.0f} s; retry later", retry_after_s=5
        )

    def _check_room_to_wait(self) -> None:
        num = len(self.waiting) + len(self.pending)
        if num >= self.max_waiting:
            raise TooManyRequests(
                f"{num} requests are already waiting on this backend; retry later",
                retry_after_s=1,
            )

    def enqueue(self, cmd: Complete) -> None:
        """A stateless request joins the wait; past `max_waiting` it is refused (429)."""
        self._check_room_to_wait()
        self.waiting.add(cmd, self.clock.now())

    def _expire_waiting(self) -> None:
        gone, late = self.waiting.take_expired(self.clock.now(), self.queue_timeout_s)
        for cmd in gone:  # the client went away: it holds nothing any more
            self.outbox.reject(cmd.reply, JugglerError("the client went away"))
            self.notify(RequestDone(cmd.request_id, self.worker_id))
        for cmd in late:
            self.refuse_stateless(cmd, self._timed_out(cmd.adapter))

    def start_stateless(self, cmd: Complete, reuse: Reuse) -> None:
        """Start a stateless request on the sequence `reuse` chose, keeping its cached
        prefix; a request that cannot start is answered with its error."""
        s = self.kv.start_ephemeral(cmd.request_id, cmd.prompt, reuse, cmd.adapter)
        try:
            if len(cmd.prompt) >= self.kv.max_seq:
                raise ContextOverflow(overflow_message(len(cmd.prompt), self.kv.max_seq))
            self.adapters.load(cmd.adapter, self._busy())
            self.gens.begin(s, cmd.params, cmd.sink, cmd.t_arrival)
        except JugglerError as exc:
            self.kv.release(s)
            self.refuse_stateless(cmd, exc)
            return
        self.outbox.resolve(cmd.reply, {"session_id": s.session_id})

    def refuse_stateless(self, cmd: Complete, error: JugglerError) -> None:
        self.outbox.reject(cmd.reply, error)
        self.notify(RequestDone(cmd.request_id, self.worker_id))
