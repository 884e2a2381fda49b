"""How long a speculative draft pays: the bounds on a draft's length, and
`best_length`, which weighs what a draft is expected to keep (`survival`) against what
its rows cost (`decode_cost`). Pure: no llama.cpp, no clock, no logging.

How long a draft pays depends on the hardware and on the text. Every draft row costs
compute; each draft token kept saves a later decode's share. A draft is only proposed
at the length that yields the most tokens a second, and not at all when none saves, so
open-ended text, where drafts are rarely right, does not pay for rows the model throws
away.
"""

from __future__ import annotations

from juggler.engine.schedule.decode_cost import DecodeCost

#: A sequence's first draft is at most this long; each draft kept to its end lets the
#: next be twice as long, and a refused one halves the bound (or makes it twice what
#: was kept, if more; at least `MIN_CAP`). The estimates that size drafts are learned
#: across a worker's sequences, and a story served after a hundred quotes must not bet
#: fifty rows on them.
FIRST_CAP = 8
MIN_CAP = 4
#: A greedy answer recalled for a greedy request after a long match (a request asked
#: again) may be drafted this far from its first draft, not grown from `FIRST_CAP`: it
#: parts only at a near-tie, and on a CPU a decode of 64 rows or more costs less a row
#: than a shorter one (llama.cpp's flash attention tiles its query rows from 64 on:
#: `bench/bench_rows.py`). Where its near-ties lie, and which decode shapes give them
#: again, cuts it shorter (`schedule.ties`). The bound halves when such a draft is
#: refused, as `FIRST_CAP`'s does.
REPEAT_CAP = 64
#: A repeat whose answer came out the same when it was asked again (`recall.Recall.add`
#: confirms it) may be drafted this far, bounded by `--spec-draft-max`: its text held
#: in another decode's shapes, and a decode of 128 rows costs less a row than two of 64
#: (2.85 ms against 3.0 on 2 CPU cores). Where its ties stop it, it stops
#: (`schedule.ties`).
CONFIRMED_CAP = 128
#: Every other draft is at most this long, whatever `--spec-draft-max` allows: a draft
#: that is not an answer given before is not bet on a decode of more than 64 rows.
DRAFT_CAP = 64
#: The share of a draft's expected kept tokens that a decode shared by several sequences
#: does not count on: there the estimates run high (a story's 8 streams asked again
#: expected 81% of their repeats' draft tokens kept and kept 67%; their short recalled
#: matches expected 61% and kept 52%), and on a CPU a draft row costs nearly a token, so
#: drafts that paid on paper ran 0.78-0.93x as fast as none. A lone stream counts its
#: estimate whole: its repeats are kept whole and its probes must stay cheap to pass.
SHARED_DISCOUNT = 0.15
#: In a decode shared by several sequences a draft is only bet where it is expected to
#: keep its tokens at least this far from the share that pays even towards all of them.
#: There a kept token saves a sequence's share of the decode and a refused one costs a
#: whole row, so on a CPU the break-even is high: on 2 cores with SmolLM2 at 8 streams,
#: 3 to 16 draft rows pay even at 61-89% kept, one or two rows only at 88% or more
#: (`bench/bench_rows.py --streams 8 --depth 120`, two runs).
#: Near it, the measured costs (which vary with the host's load and the cells the batch
#: spans) cannot tell a paying draft from a losing one, and in a burst a draft kept by a
#: stream that finishes early saves less still: the burst lasts as long as its slowest
#: stream. At 8 streams writing stories, drafts that kept 40-70% of their tokens (a
#: remembered phrase, a short match in the story itself) made bursts 0.83-0.92x as fast
#: as none. Where rows are nearly free (a GPU) the break-even is low and so is the bar.
SHARED_MARGIN = 0.5
#: While drafts do not pay, a one-token draft is still tried this often (sampled tokens),
#: so that a sequence that starts to quote is noticed.
PROBE_EVERY = 16


def best_length(
    kept: list[float],
    lengths: list[int],
    cost: DecodeCost,
    *,
    rows: int,
    num_seqs: int,
    others_kept: float = 0.0,
    depth: float = 0.0,
) -> int:
    """Of `lengths` (ascending, with `kept[i]` draft tokens expected to be kept of a draft
    `lengths[i]` long), the one that makes the decode yield tokens fastest, or 0 when
    none is faster than no draft.

    The decode now has `rows` rows and yields a token for each of its `num_seqs`
    generating sequences, plus `others_kept` from the drafts already in it, in
    `seconds(rows)` (its rows attending to `depth` cells on average). A draft of k adds
    k rows and `kept` tokens.
    Whether a draft pays is the same question as whether the time it adds buys its kept
    tokens at a token's share of the decode, `seconds(rows) / num_seqs`; which length
    is best is not: the one that saves the most time in this decode may be longer than
    the one that yields the most tokens a second, where long drafts cost more a row."""
    table = cost.at(depth)  # one band for every length weighed
    base = table.seconds(rows)
    # What the decode yields already: a token for each sequence, and what the drafts that
    # other sequences proposed for it are expected to keep. Counting their rows but not
    # their tokens made a batch of eight quoting streams look so slow that every draft
    # seemed cheap (measured: quote at 8 streams 0.76x of no drafts).
    yielded = max(1, num_seqs) + others_kept
    best, best_rate = 0, yielded / base
    shared = num_seqs > 1
    trust = 1.0 - SHARED_DISCOUNT if shared else 1.0
    for k, e in zip(lengths, kept, strict=True):
        seconds = table.seconds(rows + k)
        if shared:
            # The share of its k tokens a draft must keep to pay even, and the bar above it.
            even = min(1.0, yielded * (seconds - base) / (base * k))
            if e < k * (even + SHARED_MARGIN * (1.0 - even)):
                continue
        rate = (yielded + trust * e) / seconds
        if rate > best_rate:
            best, best_rate = k, rate
    return best
