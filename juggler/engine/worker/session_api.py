"""What a worker does to its sessions: create, append input, generate, cancel, end, and
the per-token handling of a generation. Runs only on the owning worker thread (this is
the `Worker`'s half that deals with one session at a time; `worker.py` holds the loop).
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

from juggler.engine.cache.prefix_cache import (
    MIN_USEFUL_REUSE,
    CachedSeq,
    cache_budget,
    common_prefix_len,
    over_budget,
)
from juggler.engine.llama.chat import ChatState, ChatTemplate
from juggler.engine.llama.native import Context, Model, Sampler
from juggler.engine.llama.sampling import StopMatcher
from juggler.engine.schedule.messages import Command, CommandKind
from juggler.engine.schedule.outbox import Outbox
from juggler.engine.schedule.stream import EventKind, RequestStats, StreamEvent
from juggler.engine.worker.session import Generation, Session, SessionState
from juggler.errors import (
    BadRequest,
    Conflict,
    ContextOverflow,
    JugglerError,
    Overloaded,
    SessionNotFound,
)


class SessionOps:
    """Mixin for `Worker`; the attributes below are the worker's."""

    worker_id: int
    model: Model
    ctx: Context | None
    template: ChatTemplate
    outbox: Outbox
    sessions: dict[str, Session]
    n_ctx: int
    #: Most KV cells that cached sequences of finished stateless requests may keep.
    cache_cells: int
    #: For the last few stateless requests: did each reuse a useful cached prefix?
    recent_hits: collections.deque[bool]

    if TYPE_CHECKING:  # provided by Worker

        def notify(self, cmd: Command) -> None: ...

        def kv_used(self) -> int: ...
        def live_cells(self) -> int: ...
        def free_seq_ids(self) -> list[int]: ...
        def _cached(self) -> list[CachedSeq]: ...
        def forget_cached(self, seq_id: int) -> list[int]: ...
        def ctx_seq_clear(self, seq_id: int) -> None: ...
        def now(self) -> float: ...
        def tick(self) -> int: ...

    # -- lookups -------------------------------------------------------------------
    def _session(self, cmd: Command) -> Session:
        s = self.sessions.get(cmd.session_id or "")
        if s is None or s.is_ephemeral:
            raise SessionNotFound(f"session not found: {cmd.session_id}")
        return s

    def _take_seq(self) -> int | None:
        free = self.free_seq_ids()
        if free:
            return free[0]
        cached = sorted(self._cached(), key=lambda c: c.last_used)
        if cached:
            self.forget_cached(cached[0].key)
            self.ctx_seq_clear(cached[0].key)
            return cached[0].key
        return None

    # -- session API ---------------------------------------------------------------
    def create_session(self, cmd: Command) -> None:
        assert cmd.session_id is not None
        seq = self._take_seq()
        if seq is None:
            self.notify(
                Command(
                    CommandKind.SESSION_GONE, session_id=cmd.session_id, worker_id=self.worker_id
                )
            )
            raise Overloaded(
                "every sequence of this backend is held by a live session; "
                "end a session or start the backend with a larger --parallel"
            )
        s = Session(cmd.session_id, seq, last_used=self.tick())
        self.sessions[s.session_id] = s
        self.outbox.resolve(cmd.reply, {"session_id": s.session_id})

    def append_input(self, cmd: Command) -> None:
        s = self._session(cmd)
        if s.generation is not None:
            raise Conflict("the session is generating; cancel it or wait for it to finish")
        self._drop_speculation(s)
        total = s.n_past + len(s.pending)
        if cmd.messages is not None:
            new = self._chat_delta(s, cmd.messages)
        else:
            if s.chat is not None:
                raise BadRequest("this is a chat session: send messages, not text", param="text")
            add_special = total == 0 and self.model.add_bos
            new = self.model.tokenize(cmd.text or "", add_special=add_special)
            self._check_room(total, len(new))
            s.pending.extend(new)
        s.last_used = self.tick()
        self.outbox.resolve(
            cmd.reply,
            {
                "session_id": s.session_id,
                "n_tokens": len(new),
                "n_past": s.n_past + len(s.pending),
            },
        )
        if cmd.messages and cmd.messages[-1].get("role") == "user":
            self._speculate_header(s)

    def _speculate_header(self, s: Session) -> None:
        """After a user turn, append the assistant header now: the worker prefills it
        with the turn and keeps the logits, so a /generate that follows samples its first
        token at once instead of waiting for another decode. Dropped if input comes
        instead (`_drop_speculation`)."""
        assert s.chat is not None
        text = self.template.generation_prompt(s.chat.messages)
        if not text:
            return
        header = self.model.tokenize(text, add_special=False)
        if s.n_past + len(s.pending) + len(header) + 1 > self.n_ctx:
            return  # no room: /generate will say so
        s.pending.extend(header)
        s.spec_header = (text, len(header))

    def _drop_speculation(self, s: Session) -> None:
        """Take a speculative assistant header back out (pending or already in KV)."""
        if s.spec_header is None:
            return
        _, n = s.spec_header
        s.spec_header = None
        s.saved_logits = None
        unsent = min(n, len(s.pending))
        del s.pending[len(s.pending) - unsent :]
        if n > unsent:
            self._truncate(s, s.n_past - (n - unsent))

    def _chat_delta(self, s: Session, messages: list[dict[str, Any]]) -> list[int]:
        """Render the chat template incrementally; append only the new turn's tokens."""
        if s.chat is None:
            if s.tokens or s.pending:
                raise BadRequest(
                    "this is a text session: send text, not messages", param="messages"
                )
            s.chat = ChatState()
        chat = s.chat
        delta = chat.delta_for(self.template, messages)
        if delta is not None:
            held = s.n_past + len(s.pending)
            bos = self.template.bos_token
            add_special = held == 0 and self.model.add_bos and not (bos and delta.startswith(bos))
            new = self.model.tokenize(delta, add_special=add_special)
            self._check_room(held, len(new))
            s.pending.extend(new)
            chat.text += delta
        else:
            # The template rewrote earlier turns: diff at the token level instead.
            full = chat.full_text(self.template, messages)
            bos = self.template.bos_token
            add_special = self.model.add_bos and not (bos and full.startswith(bos))
            target = self.model.tokenize(full, add_special=add_special)
            if len(target) >= self.n_ctx:
                raise ContextOverflow(self._overflow_message(len(target)))
            keep = common_prefix_len([*s.tokens, *s.pending], target)
            if keep < s.n_past:
                self._truncate(s, keep)
            s.pending = target[s.n_past :]
            new = target[keep:]
            chat.text = full
        chat.messages.extend(dict(m) for m in messages)
        return new

    def _truncate(self, s: Session, keep: int) -> None:
        """Keep only the first `keep` tokens of a sequence's KV (whole removal if the
        memory cannot drop a partial range, e.g. sliding-window caches)."""
        assert self.ctx is not None
        if not self.ctx.seq_rm(s.seq_id, keep, -1):
            self.ctx.seq_rm(s.seq_id, -1, -1)
            s.pending[:0] = s.tokens[:keep]
            keep = 0
        del s.tokens[keep:]

    def _check_room(self, held: int, n_new: int) -> None:
        """Refuse input that cannot fit: in its own sequence (--ctx-size), or in the KV cells
        the worker's live sessions share (cached sequences count as free: they are
        evicted on demand)."""
        if held + n_new >= self.n_ctx:
            raise ContextOverflow(self._overflow_message(held + n_new))
        live = self.live_cells()
        if live + n_new >= self.n_ctx:
            raise ContextOverflow(self._full_message(live, n_new))

    def _full_message(self, live: int, n_new: int) -> str:
        return (
            f"the KV cache is full: live sessions hold {live} of {self.n_ctx} cells and this "
            f"request needs {n_new} more; end idle sessions or raise --ctx-size"
        )

    def _overflow_message(self, n: int) -> str:
        return (
            f"this request needs {n} tokens but the context holds {self.n_ctx} "
            "per sequence (--ctx-size)"
        )

    def start_generation(self, cmd: Command) -> None:
        s = self._session(cmd)
        if s.generation is not None:
            raise Conflict("the session is already generating")
        assert cmd.params is not None and cmd.sink is not None
        continues = False
        saved = None
        if s.chat is not None:
            msgs = s.chat.messages
            continues = bool(msgs) and msgs[-1].get("role") == "assistant"
            prompt = "" if continues else self.template.generation_prompt(msgs)
            if s.spec_header is not None and s.spec_header[0] == prompt:
                s.chat.text += prompt  # already appended (and maybe decoded) at /input
                s.spec_header = None
                saved, s.saved_logits = s.saved_logits, None
                prompt = ""
            else:
                self._drop_speculation(s)
            if prompt:
                header = self.model.tokenize(prompt, add_special=False)
                self._check_room(s.n_past + len(s.pending), len(header) + 1)
                s.pending.extend(header)
                s.chat.text += prompt
        else:
            self._check_room(s.n_past + len(s.pending), 1)
        if not s.pending and saved is not None:
            # The speculative prefill already produced this turn's logits.
            self._begin(s, cmd)
            g = s.generation
            assert g is not None
            self.outbox.resolve(cmd.reply, {"session_id": s.session_id})
            self.on_token(s, g.sampler.sample_logits(saved))
            return
        if not s.pending:
            if not s.tokens:
                raise BadRequest("the session has no input yet; POST /input first")
            # Its logits are gone: decode the last token again.
            last = s.tokens[-1]
            self._truncate(s, s.n_past - 1)
            s.pending.append(last)
        self._begin(s, cmd)
        assert s.generation is not None
        s.generation.continues_reply = continues
        self.outbox.resolve(cmd.reply, {"session_id": s.session_id})

    def _begin(self, s: Session, cmd: Command) -> None:
        params = cmd.params
        assert params is not None and cmd.sink is not None
        held = s.n_past + len(s.pending)
        room = self.n_ctx - held
        if room <= 0:
            raise ContextOverflow(self._overflow_message(held + 1))
        sampler = Sampler(
            self.model,
            temperature=params.temperature,
            top_k=params.top_k,
            top_p=params.top_p,
            min_p=params.min_p,
            seed=params.resolved_seed(),
            repeat_penalty=params.repeat_penalty,
            frequency_penalty=params.frequency_penalty,
            presence_penalty=params.presence_penalty,
            penalty_last_n=params.penalty_last_n,
            banned=self.model.eog_tokens() if params.ignore_eos else (),
        )
        cmd.sink.bind(self.outbox)
        s.generation = Generation(
            params=params,
            sink=cmd.sink,
            sampler=sampler,
            max_new_tokens=max(0, min(params.max_new_tokens, room)),
            t_arrival=cmd.t_arrival or self.now(),
            prompt_tokens=held,
            stop=StopMatcher(params.stop),
        )
        s.state = SessionState.GENERATING
        s.last_used = self.tick()

    def admit_stateless(self, cmd: Command, seq_id: int, keep: int) -> None:
        """Start a stateless request on `seq_id`, keeping `keep` cached prefix tokens."""
        assert cmd.session_id is not None and self.ctx is not None
        tokens = self.forget_cached(seq_id)[:keep]
        if not keep:
            self.ctx_seq_clear(seq_id)
        s = Session(
            cmd.session_id,
            seq_id,
            is_ephemeral=True,
            tokens=list(tokens),
            pending=list(cmd.prompt[keep:]),
            num_reused=keep,
        )
        if keep and not self.ctx.seq_rm(seq_id, keep, -1):
            self.ctx_seq_clear(seq_id)
            s.pending[:0] = s.tokens
            s.tokens.clear()
            s.num_reused = 0
        self.sessions[s.session_id] = s
        self.recent_hits.append(s.num_reused >= MIN_USEFUL_REUSE)
        try:
            if len(cmd.prompt) >= self.n_ctx:
                raise ContextOverflow(self._overflow_message(len(cmd.prompt)))
            self._begin(s, cmd)
        except JugglerError as exc:
            self._release(s)
            self.outbox.reject(cmd.reply, exc)
            self.notify(
                Command(CommandKind.REQUEST_DONE, session_id=s.session_id, worker_id=self.worker_id)
            )
            return
        self.outbox.resolve(cmd.reply, {"session_id": s.session_id})

    def cancel(self, cmd: Command) -> None:
        s = self._session(cmd)
        was = s.generation is not None
        if was:
            self.finish(s, "cancelled")
        self.outbox.resolve(cmd.reply, {"session_id": s.session_id, "cancelled": was})

    def end_session(self, cmd: Command) -> None:
        s = self._session(cmd)
        if s.generation is not None:
            self.finish(s, "cancelled")
        self._release(s)
        self.notify(
            Command(CommandKind.SESSION_GONE, session_id=s.session_id, worker_id=self.worker_id)
        )
        self.outbox.resolve(cmd.reply, {"session_id": s.session_id, "deleted": True})

    def _release(self, s: Session) -> None:
        self.sessions.pop(s.session_id, None)
        self.ctx_seq_clear(s.seq_id)
        s.state = SessionState.CLOSED

    # -- generation ------------------------------------------------------------------
    def on_token(self, s: Session, token: int) -> None:
        g = s.generation
        assert g is not None
        now = self.now()
        if g.t_first == 0.0:
            g.t_first = now
        g.t_last = now
        if self.model.is_eog(token):
            self.finish(s, "stop")
            return
        g.num_generated += 1
        g.token_times.append(now)
        s.pending.append(token)
        raw = g.utf8.feed(self.model.piece(token))
        g.raw_parts.append(raw)
        emit, stopped = g.stop.feed(raw)
        if emit:
            g.text_parts.append(emit)
        if stopped:
            if emit:
                g.sink.push(StreamEvent(EventKind.TOKEN, text=emit, token_ids=(token,)))
            self.finish(s, "stop")
            return
        if not g.sink.push(StreamEvent(EventKind.TOKEN, text=emit, token_ids=(token,))):
            self.finish(
                s,
                "error",
                error=Overloaded("the client did not keep up with the stream; it was ended"),
            )
            return
        if g.num_generated >= g.max_new_tokens or s.n_past + len(s.pending) >= self.n_ctx:
            self.finish(s, "length")

    def finish(self, s: Session, reason: str, error: JugglerError | None = None) -> None:
        """End the session's generation: final event, stats, back to IDLE or CACHED."""
        g = s.generation
        if g is None:
            return
        tail = ""
        flushed = g.utf8.flush()
        g.raw_parts.append(flushed)
        if not g.stop.is_matched:
            more, _ = g.stop.feed(flushed)
            tail = more + g.stop.flush()
            g.text_parts.append(tail)
        decode_s = g.t_last - g.t_first
        stats = RequestStats(
            input_tokens=g.prompt_tokens,
            output_tokens=g.num_generated,
            prompt_tokens_prefilled=s.num_prefilled,
            prompt_tokens_reused=max(0, g.prompt_tokens - s.num_prefilled),
            time_to_first_token=(g.t_first - g.t_arrival) if g.t_first else 0.0,
            tokens_per_second=(g.num_generated - 1) / decode_s
            if g.num_generated > 1 and decode_s > 0
            else 0.0,
            decode_token_count=g.num_generated,
            decode_token_times=tuple(
                b - a for a, b in zip(g.token_times, g.token_times[1:], strict=False)
            ),
        )
        g.sampler.close()
        s.generation = None
        s.num_prefilled = 0
        s.last_used = self.tick()
        if s.chat is not None:
            reply = "".join(g.text_parts)
            if g.continues_reply:
                s.chat.messages[-1]["content"] += reply
            else:
                s.chat.messages.append({"role": "assistant", "content": reply})
            s.chat.text += "".join(g.raw_parts)
        if s.is_ephemeral:
            s.pending.clear()
            s.state = SessionState.CACHED
            budget = cache_budget(self.cache_cells, self.recent_hits)
            for key in over_budget(self._cached(), budget, keep=s.seq_id):
                self.forget_cached(key)
                self.ctx_seq_clear(key)
        else:
            s.state = SessionState.IDLE
        # The master records the stats before the client can see the end of its stream
        # (both travel through call_soon_threadsafe, in order), so /stats is never stale.
        self.notify(
            Command(
                CommandKind.REQUEST_DONE,
                session_id=s.session_id,
                worker_id=self.worker_id,
                stats=stats,
            )
        )
        if error is not None:
            g.sink.finish(StreamEvent(EventKind.ERROR, text=tail, error=error, stats=stats))
        else:
            g.sink.finish(StreamEvent(EventKind.DONE, text=tail, finish_reason=reason, stats=stats))
