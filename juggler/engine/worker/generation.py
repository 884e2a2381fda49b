"""Generation: start a session's generation, handle each sampled token, finish it.

`Generations` runs on the worker thread. A sampled token goes into the session's pending
input (it is decoded on the next tick), its text through UTF-8 assembly and the stop
matcher into the request's stream. A generation ends on an end-of-generation token, a
stop string, its token budget, the end of its sequence (--ctx-size), a cancel, a stream
that is too far behind, or an error; `finish` sends the final event with the stats.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

from juggler.engine.llama.ports import LlamaModel, Logits
from juggler.engine.llama.sampling import SamplingParams, StopMatcher, TokenLogprob, token_logprobs
from juggler.engine.schedule.batch import FINAL_ROWS
from juggler.engine.schedule.decode_cost import DecodeCost
from juggler.engine.schedule.drafts import MAX_MATCH
from juggler.engine.schedule.messages import Notice, RequestDone
from juggler.engine.schedule.outbox import Outbox
from juggler.engine.schedule.recall import Recall
from juggler.engine.schedule.stream import EventKind, RequestStats, StreamEvent, StreamSink
from juggler.engine.schedule.survival import Survival
from juggler.engine.schedule.ties import tie_of
from juggler.engine.worker.config import Clock
from juggler.engine.worker.context_slot import ContextSlot
from juggler.engine.worker.kv import KvBook
from juggler.engine.worker.policy import overflow_message
from juggler.engine.worker.session import Generation, Session, SessionState
from juggler.engine.worker.speculation import Speculation
from juggler.errors import ContextOverflow, JugglerError, Overloaded

#: Adapters (the base model counts as one) whose recent generations a worker remembers.
MAX_RECALLS = 4


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
        *,
        speculative: bool = False,
        spec_draft_max: int = 128,
    ) -> None:
        self.model = model
        self.ctx = ctx
        self.kv = kv
        self.outbox = outbox
        self.notify = notify
        self.clock = clock
        self.worker_id = worker_id
        self.n_ctx = kv.max_seq  # one sequence's tokens (--ctx-size)
        #: Speculative decoding for requests that do not say, and its longest draft.
        self.speculative = speculative
        self.spec_draft_max = spec_draft_max
        #: Draft tokens decoded, and how many of them the samples kept (all generations).
        self.num_drafted = 0
        self.num_accepted = 0
        #: Generations begun and finished (the worker publishes a snapshot when they move).
        self.num_begun = self.num_finished = 0
        #: What a decode costs on this worker (the decoder measures, drafts are sized by it),
        #: and how far drafts are kept here (each generation's estimate starts from it).
        self.cost, self.survival = DecodeCost(), Survival()
        #: What this worker's recent generations said (drafts for repeated answers), by
        #: LoRA adapter: an adapter's answers say little of the base model's.
        self.recalls: dict[str | None, Recall] = {}
        #: Whether requests wait to start on this worker (its inbox, admission): then no
        #: stream decodes alone for long (the worker sets it).
        self.crowded: Callable[[], bool] = lambda: False

    def recall(self, adapter_id: str | None) -> Recall:
        """The memory of recent generations run with `adapter_id` (the base: None); the
        least recently used adapter's is forgotten past `MAX_RECALLS`."""
        recall = self.recalls.pop(adapter_id, None)
        if recall is None:
            recall = Recall()
        self.recalls[adapter_id] = recall  # most recently used last
        while len(self.recalls) > MAX_RECALLS:
            del self.recalls[next(iter(self.recalls))]
        return recall

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
        spec = params.speculative if params.speculative is not None else self.speculative
        if params.temperature <= 0.0 and (spec or self.speculative):
            g.ties = []  # remembered with its ties (see `finish`)
        if spec:
            g.spec = Speculation(
                self.spec_draft_max,
                Survival(self.survival),
                recall=self.recall(s.adapter_id),
                greedy=params.temperature <= 0.0,
            )
        s.generation = g
        self.num_begun += 1
        s.state = SessionState.GENERATING
        s.last_used = self.clock.tick
        if g.spec is not None and 0 < len(s.pending) <= FINAL_ROWS:
            # A prompt asked again decodes only its last rows (`prefix_cache.most_kept`):
            # its answer, remembered, is drafted beside them, so the first decode already
            # verifies it (a repeat of records: 2 rows, then 8, then 129, was one decode
            # of 17 ms more than it needed).
            self.propose(s, g)
        return g

    def on_rows(
        self,
        s: Session,
        first_row: int,
        drafts: list[int],
        row_logits: Callable[[int], Logits],
        num_rows: int = 1,
    ) -> None:
        """Sample `s`'s rows of the last decode (of `num_rows` rows in all): `first_row`
        (after its last token) and one more per draft token decoded after it. In order,
        each draw is the output's next token; a draft stays in the KV while the draw
        equals it, and at the first draw that differs (or the end of the generation) the
        drafts after it are rolled back. A remembered greedy generation records each
        token's tie (`schedule.ties`). Then the next draft is proposed (speculative
        decoding, see `speculation`)."""
        g = s.generation
        assert g is not None
        kept = 0
        for j in range(len(drafts) + 1):
            row = first_row + j
            try:
                token = g.sampler.sample(row)
            except JugglerError as exc:  # its grammar is too slow to follow (issue 27)
                if drafts:
                    self.kv.rollback(s, s.n_past - (len(drafts) - j))
                self.finish(s, "error", error=exc)
                return
            in_kv = j < len(drafts) and token == drafts[j]
            eog = self.model.is_eog(token)
            if g.ties is not None and not eog:
                g.ties.append(tie_of(g.sampler.lead(row, token), num_rows))
            self.on_sampled(s, token, functools.partial(row_logits, row), in_kv=in_kv)
            if not in_kv or eog:
                break
            kept += 1
            if s.generation is not g:
                break
        if drafts:
            self.num_drafted += len(drafts)
            self.num_accepted += kept
            if kept < len(drafts):
                self.kv.rollback(s, s.n_past - (len(drafts) - kept))
            if g.spec is not None:
                g.spec.verified(len(drafts), kept)
        if s.generation is g and g.spec is not None:
            self.propose(s, g)

    def propose(self, s: Session, g: Generation) -> None:
        """Draft after `s`'s pending input (its sampled token, or a prompt's last rows):
        see `speculation`."""
        assert g.spec is not None
        # Room: what the generation may still produce after the pending token (a fully
        # accepted draft also yields one more sampled token), and the sequence's cells.
        left = min(g.max_new_tokens - g.num_generated, self.n_ctx - s.n_past - len(s.pending))
        # The next decode's rows so far: a token for each generating sequence (a prompt's
        # rows for this one), and the drafts proposed this tick (they are cleared once
        # decoded), and the cells those rows attend to (what a row costs depends on it).
        running = self.kv.table.running()
        rows, cells, others = 0, 0, 0.0
        for r in running:
            n = len(r.pending) if r is s else 1 + r.num_draft
            rows += n
            cells += n * r.n_past
            if r.num_draft and r.generation is not None and r.generation.spec is not None:
                others += r.generation.spec.expected_kept
        depth = cells / rows if rows else float(s.n_past)
        draft = g.spec.propose(
            s.tokens,
            s.pending,
            left - 1,
            self.cost,
            len(running),
            rows,
            others,
            depth,
            alone=len(running) == 1 and not self.crowded(),
        )
        if draft and min(draft) < 0:  # never an image's placeholder (`llama.media`)
            draft = draft[: next(i for i, t in enumerate(draft) if t < 0)]
        if draft:
            s.pending.extend(draft)
            s.num_draft = len(draft)

    def on_sampled(
        self, s: Session, token: int, logits: Callable[[], Logits], *, in_kv: bool = False
    ) -> None:
        """A token sampled for `s` from `logits()` (read only when the request asked for
        log-probabilities): see `on_token`."""
        g = s.generation
        assert g is not None
        k = g.params.top_logprobs
        lp = None if k is None else token_logprobs(logits(), token, k)
        self.on_token(s, token, lp, in_kv=in_kv)

    def on_token(
        self, s: Session, token: int, logprob: TokenLogprob | None = None, *, in_kv: bool = False
    ) -> None:
        """One sampled token: stream its text, finish on EOG / stop / budget / full. It
        goes into the pending input (decoded next tick) unless it is `in_kv` already (an
        accepted draft)."""
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
        if not in_kv:
            s.pending.append(token)
        raw = g.utf8.feed(self.model.piece(token))
        g.raw_parts.append(raw)
        emit, stopped = g.stop.feed(raw)
        if emit:
            g.text_parts.append(emit)
        if stopped:
            if emit:
                g.sink.push_token(emit, token, logprob)
            self.finish(s, "stop")
            return
        if not g.sink.push_token(emit, token, logprob):
            self.finish(
                s,
                "error",
                error=Overloaded("the client did not keep up with the stream; it was ended"),
            )
            return
        if g.num_generated >= g.max_new_tokens or s.n_past + len(s.pending) >= self.n_ctx:
            self.finish(s, "length")

    def abort_all(self, error: JugglerError) -> None:
        """The worker died: end every generation's stream with `error`, nothing else."""
        for s in self.kv.table.values():
            g = s.generation
            if g is not None:
                s.generation = None
                g.sink.finish(StreamEvent(EventKind.ERROR, error=error))
                with contextlib.suppress(Exception):
                    g.sampler.close()

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
        self.num_finished += 1
        g.sampler.close()
        if s.num_draft:  # drafts not decoded yet are never input
            del s.pending[-s.num_draft :]
            s.num_draft = 0
        if g.spec is not None or self.speculative:
            # The sequence (tokens, then pending) from the context's last `MAX_MATCH`
            # tokens on: only those are remembered, so a long session is not copied.
            start = max(0, g.prompt_tokens - MAX_MATCH)
            said = [*s.tokens[start:], *s.pending[max(0, start - len(s.tokens)) :]]
            cut = g.prompt_tokens - start
            self.recall(s.adapter_id).add(
                said[:cut], said[cut:], g.params.temperature <= 0.0, g.ties or ()
            )
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
            done = StreamEvent(
                EventKind.DONE,
                text=tail,
                finish_reason=reason,
                stop_sequence=g.stop.matched,
                stats=stats,
            )
            g.sink.finish(done)
