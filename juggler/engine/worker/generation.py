"""Generation: start a session's generation, handle each sampled token, finish it.

`Generations` runs on the worker thread. A sampled token goes into the session's pending
input (it is decoded on the next tick), its text through UTF-8 assembly and the stop
matcher into the request's stream. A generation ends on an end-of-generation token, a
stop string, its token budget, the end of its sequence (--ctx-size), a cancel, a stream
that is too far behind, or an error; `finish` sends the final event with the stats.
"""

from __future__ import annotations

from collections.abc import Callable

from juggler.engine.llama.ports import LlamaModel, Logits
from juggler.engine.llama.sampling import SamplingParams, StopMatcher, TokenLogprob, token_logprobs
from juggler.engine.schedule.messages import Notice, RequestDone
from juggler.engine.schedule.outbox import Outbox
from juggler.engine.schedule.stream import EventKind, RequestStats, StreamEvent, StreamSink
from juggler.engine.worker.config import Clock
from juggler.engine.worker.context_slot import ContextSlot
from juggler.engine.worker.kv import KvBook
from juggler.engine.worker.policy import overflow_message
from juggler.engine.worker.session import Generation, Session, SessionState
from juggler.errors import ContextOverflow, JugglerError, Overloaded


def request_stats(g: Generation, num_prefilled: int) -> RequestStats:
    """What a finished generation did (pure)."""
    decode_s = g.t_last - g.t_first
    return RequestStats(
        input_tokens=g.prompt_tokens,
        output_tokens=g.num_generated,
        prompt_tokens_prefilled=num_prefilled,
        prompt_tokens_reused=max(0, g.prompt_tokens - num_prefilled),
        time_to_first_token=(g.t_first - g.t_arrival) if g.t_first else 0.0,
        tokens_per_second=(g.num_generated - 1) / decode_s
        if g.num_generated > 1 and decode_s > 0
        else 0.0,
        decode_token_count=g.num_generated,
        decode_token_times=tuple(
            b - a for a, b in zip(g.token_times, g.token_times[1:], strict=False)
        ),
    )


class Generations:
    def __init__(
        self,
        model: LlamaModel,
        ctx: ContextSlot,
        kv: KvBook,
        outbox: Outbox,
        notify: Callable[[Notice], None],
        clock: Clock,
        worker_id: int = 0,
    ) -> None:
        self.model = model
        self.ctx = ctx
        self.kv = kv
        self.outbox = outbox
        self.notify = notify
        self.clock = clock
        self.worker_id = worker_id
        self.n_ctx = kv.n_ctx

    def begin(
        self,
        s: Session,
        params: SamplingParams,
        sink: StreamSink,
        t_arrival: float,
        *,
        continues_reply: bool = False,
    ) -> Generation:
        """Register a generation on `s` (its input is pending or its logits saved)."""
        held = s.n_past + len(s.pending)
        room = self.n_ctx - held
        if room <= 0:
            raise ContextOverflow(overflow_message(held + 1, self.n_ctx))
        banned = self.model.eog_tokens() if params.ignore_eos else ()
        sampler = self.model.new_sampler(self.ctx.ensure(), params, banned=banned)
        sink.bind(self.outbox)
        g = Generation(
            params=params,
            sink=sink,
            sampler=sampler,
            max_new_tokens=max(0, min(params.max_new_tokens, room)),
            t_arrival=t_arrival or self.clock.now(),
            prompt_tokens=held,
            stop=StopMatcher(params.stop),
            continues_reply=continues_reply,
        )
        s.generation = g
        s.state = SessionState.GENERATING
        s.last_used = self.clock.tick
        return g

    def on_sampled(self, s: Session, token: int, logits: Callable[[], Logits]) -> None:
        """A token sampled for `s` from `logits()` (read only when the request asked for
        log-probabilities): see `on_token`."""
        g = s.generation
        assert g is not None
        k = g.params.top_logprobs
        self.on_token(s, token, None if k is None else token_logprobs(logits(), token, k))

    def on_token(self, s: Session, token: int, logprob: TokenLogprob | None = None) -> None:
        """One sampled token: stream its text, finish on EOG / stop / budget / full."""
        g = s.generation
        assert g is not None
        now = self.clock.now()
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
        lps = (logprob,) if logprob is not None else ()
        event = StreamEvent(EventKind.TOKEN, text=emit, token_ids=(token,), logprobs=lps)
        if stopped:
            if emit:
                g.sink.push(event)
            self.finish(s, "stop")
            return
        if not g.sink.push(event):
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
        stats = request_stats(g, s.num_prefilled)
        g.sampler.close()
        s.generation = None
        s.num_prefilled = 0
        s.last_used = self.clock.tick
        if s.chat is not None:
            reply = "".join(g.text_parts)
            if g.continues_reply:
                s.chat.messages[-1]["content"] += reply
            else:
                s.chat.messages.append({"role": "assistant", "content": reply})
            s.chat.text += "".join(g.raw_parts)
        self.kv.on_generation_end(s)
        # The master records the stats before the client can see the end of its stream
        # (both travel through the outbox, in order), so /stats is never stale.
        self.notify(RequestDone(s.session_id, self.worker_id, stats))
        if error is not None:
            g.sink.finish(StreamEvent(EventKind.ERROR, text=tail, error=error, stats=stats))
        else:
            g.sink.finish(StreamEvent(EventKind.DONE, text=tail, finish_reason=reason, stats=stats))
