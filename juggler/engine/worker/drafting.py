"""Speculative decoding across a worker's generations: what they remember, and the drafts.

`Drafting` is the part of `Generations` (generation.py) that owns the worker-wide side of
speculation: whether a request drafts when it does not say, the longest draft, the cost
of a decode (`schedule.decode_cost`) and how far drafts survive here (`schedule.
survival`), what recent generations said by adapter (`schedule.recall`, `remember`), the
proposal of each draft (`propose`, after `speculation`) and the counts of drafted and
accepted tokens. Sampling, streaming and finishing a generation are `Generations`'.
"""

from __future__ import annotations

from collections.abc import Callable

from juggler.engine.schedule.decode_cost import DecodeCost
from juggler.engine.schedule.drafts import MAX_MATCH
from juggler.engine.schedule.recall import Recall
from juggler.engine.schedule.survival import Survival
from juggler.engine.worker.kv import KvBook
from juggler.engine.worker.next_rows import NextRows, count
from juggler.engine.worker.session import Generation, Session
from juggler.engine.worker.speculation import has_room_beside

#: Adapters (the base model counts as one) whose recent generations a worker remembers.
MAX_RECALLS = 4


class Drafting:
    """The drafting state of one worker's generations; `Generations` sets `kv` and
    `n_ctx` (one sequence's tokens)."""

    kv: KvBook
    n_ctx: int

    def __init__(self, *, speculative: bool, spec_draft_max: int) -> None:
        #: Speculative decoding for requests that do not say, and its longest draft.
        self.speculative = speculative
        self.spec_draft_max = spec_draft_max
        #: Draft tokens decoded, and how many of them the samples kept (all generations).
        self.num_drafted = 0
        self.num_accepted = 0
        #: What a decode costs on this worker with the thread count of its last decode (the
        #: decoder measures, drafts are sized by it), and how far drafts are kept here
        #: (each generation's estimate starts from it).
        self.cost, self.survival = DecodeCost(), Survival()
        #: The thread count `cost` was measured with (0: none yet), and the tables of the
        #: other counts this worker decoded with (see `use_threads`).
        self.cost_threads = 0
        self._costs: dict[int, DecodeCost] = {}
        #: What this worker's recent generations said (drafts for repeated answers), by
        #: LoRA adapter: an adapter's answers say little of the base model's.
        self.recalls: dict[str | None, Recall] = {}
        #: Whether requests wait to start on this worker (its inbox, admission): then no
        #: stream decodes alone for long (the worker sets it).
        self.crowded: Callable[[], bool] = lambda: False
        #: The next decode's rows while the rows of the last one are handled.
        self._next_rows: NextRows | None = None

    def use_threads(self, n: int) -> None:
        """The decode just run used `n` threads: from now on decodes are timed, and drafts
        priced, in that count's table. A decode of several rows takes nearly twice as long
        with one thread as with two on 2 cores, and the count changes with the load (two
        workers busy: one thread each; one busy: both). Priced from a burst's one-thread
        decodes, a lone stream's two-thread drafts looked too dear to pay, were never
        tried, so never measured again: a lone SmolLM2 stream lost its drafts (issue 47)."""
        if n == self.cost_threads:
            return
        if self.cost_threads:
            self._costs[self.cost_threads] = self.cost
            self.cost = self._costs.pop(n) if n in self._costs else DecodeCost()
        self.cost_threads = n

    def count_next_rows(self) -> None:
        """The rows of a decode of several sequences are about to be handled, one after
        another: the next decode's rows are counted once now (`next_rows`) and kept as
        each is `handled`, until `forget_next_rows`."""
        self._next_rows = NextRows(self.kv.table.running())

    def handled(self, s: Session) -> None:
        if self._next_rows is not None:
            self._next_rows.record(s)

    def forget_next_rows(self) -> None:
        self._next_rows = None

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
        nxt = self._next_rows
        num_seqs, rows, cells, others = (
            nxt.seen_by(s) if nxt is not None else count(s, self.kv.table.running())
        )
        if not has_room_beside(num_seqs):
            return  # no draft fits beside so many streams
        depth = cells / rows if rows else float(s.n_past)
        draft = g.spec.propose(
            s.tokens,
            s.pending,
            left - 1,
            self.cost,
            num_seqs,
            rows,
            others,
            depth,
            alone=num_seqs == 1 and not self.crowded(),
        )
        if draft and min(draft) < 0:  # never an image's placeholder (`llama.media`)
            draft = draft[: next(i for i, t in enumerate(draft) if t < 0)]
        if draft:
            s.pending.extend(draft)
            s.num_draft = len(draft)

    def remember(self, s: Session, g: Generation) -> None:
        """At the end of `g` on `s`: what it said goes into its adapter's recall (when it
        drafted, or this worker drafts by default)."""
        if g.spec is not None or self.speculative:
            # The sequence (tokens, then pending) from the context's last `MAX_MATCH`
            # tokens on: only those are remembered, so a long session is not copied.
            start = max(0, g.prompt_tokens - MAX_MATCH)
            said = [*s.tokens[start:], *s.pending[max(0, start - len(s.tokens)) :]]
            cut = g.prompt_tokens - start
            self.recall(s.adapter_id).add(
                said[:cut], said[cut:], g.params.temperature <= 0.0, g.ties or ()
            )
