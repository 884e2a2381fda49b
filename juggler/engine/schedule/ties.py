"""Where a greedy answer asked again is given again exactly, and how far to draft it so
that it is. Pure: no llama.cpp, no clock.

llama.cpp's arithmetic depends on the shape of a decode. On a CPU its flash attention
takes one path for a single row once the KV it attends to reaches 512 cells (split over
the cells), another for 2 to 63 rows, and a tiled one from 64 rows (`ggml-cpu/ops.cpp`:
`use_split_kv_path`, `use_tiled`). The logits of one token differ by rounding between
the paths, and a greedy draw follows them only where the best two logits are nearly
equal. Measured with SmolLM2-135M (160-token answers, the first answer decoded row by
row, then the same tokens decoded again in chunks of K rows): chunks of 2, 8, 16, 31,
32, 33, 48 and 63 rows all gave every token again; chunks of 64 parted at a near-tie in
13 of 14 answers (the best logit led by 0.013 to 0.29); and after a 700-token prompt
the 2-to-63-row chunks parted from the one-row answer in 4 of 6 answers, each time
where the lead was under 0.063.

The rounding of the one-row and the tiled paths also depends on where the sequence's
cells lie in the KV cache (the one-row path splits the cells between threads, the tiled
one takes them in tiles), so a near-tie they decided may go either way when the answer
is asked again, whatever the shape; that of 2 to 63 rows reads a row's cells in order,
wherever they lie. So each token of a remembered greedy answer carries its *tie*
(`tie_of`): nothing (`ANY`) where its best logit led the next by `TILED_NEAR_TIE` or
more; `FEW_TIE` where it led by less than `NEAR_TIE` in a decode of 2 to 63 rows, which
only such a decode repeats; `NEAR` where it led by `NEAR_TIE` to `TILED_NEAR_TIE` in a
decode that was not tiled, which any decode but a tiled one repeats; and `RISKY` where
it led by less in a one-row or tiled decode (or by less than `TILED_NEAR_TIE` in a tiled
one), which no decode repeats for sure. A repeat is drafted only as far as every token
the decode decides holds in its shape, a risky one at most as the token sampled after
the draft, where parting wastes no row (`exact_length`). Drafted so, an answer given
before is given again up to its first risky near-tie, and its drafts are kept whole.

That holds only where the KV the token was chosen on was written as it was before: a
decode writes the cells of its rows, and every later token attends to them. Measured
(`bench/bench_ties.py`, twelve grounded answers after 850 to 1,400 prompt tokens and two
stories after 20): decodes of 2 to 63 rows give bit-identical logits whatever their row
count, and so does a single row while the cells in use are at most `EXACT_CELLS`
(llama.cpp then attends over 256 cells, too few to split); a single row over more
cells, or a tiled decode, moved a token's lead over its runner-up by 0.1 at the median
and by up to 1.22, whether it chose the token or only wrote the tokens before it. The
answers decoded again by few-row decodes parted 9 times, each where the answer's
lead was under 0.14. So a recorded tie also says whether any decode that chose a token
of its answer up to it was not exact (`INEXACT`). Asked again, a near-tie (a lead under
`TILED_NEAR_TIE`) of such an answer, or of any answer on KV the repeat itself did not
write exactly, is `RISKY` until the answer is confirmed (`settle`): a confirmed answer
came out the same twice, near-ties and all, and keeps the ties its decodes chose.
"""

from __future__ import annotations

from collections.abc import Sequence

#: The decode shapes whose rounding differs (see the module doc): one row, 2 to 63 rows,
#: and from `TILE_ROWS` rows on.
ONE, FEW, TILED = 0, 1, 2
TILE_ROWS = 64
#: A token's tie: given again by a decode of any shape; only by one of 2 to 63 rows;
#: by any but a tiled one; by none for sure. `BASE` masks it out of a recorded tie.
ANY, FEW_TIE, NEAR, RISKY = 0, 1, 2, 3
BASE = 3
#: The flag of a recorded tie whose token, or a token of its answer before it, was
#: chosen by a decode that was not exact (`exact_decode`).
INEXACT = 4
#: Leads under this part between the one-row shape and the few-row one (measured: up to
#: 0.063 after 700 cells, 0.131 after 850 to 1,400, where one-row decodes had written
#: the answer: a near-tie holds only on KV written exactly, see `INEXACT`); between the tiled shape and another, leads under `TILED_NEAR_TIE` do
#: (measured: up to 0.29).
NEAR_TIE = 0.1
TILED_NEAR_TIE = 0.35
#: A one-row decode is exact (as one of 2 to 63 rows) while the cells in use are at
#: most this: llama.cpp attends over the cells in use padded to 256, and splits a
#: single row's attention over them from 512 (`ggml-cpu/ops.cpp`: `use_split_kv_path`).
EXACT_CELLS = 256


def shape(rows: int) -> int:
    """The shape of a decode of `rows` rows (all sequences' rows together)."""
    return ONE if rows <= 1 else FEW if rows < TILE_ROWS else TILED


def exact_decode(rows: int, cells: int) -> bool:
    """Whether a decode of `rows` rows, with `cells` KV cells in use after it, computes
    what any decode of 2 to 63 rows computes, bit for bit (see the module doc)."""
    decode_shape = shape(rows)
    return decode_shape == FEW or (decode_shape == ONE and cells <= EXACT_CELLS)


def tie_of(lead: float, rows: int, exact: bool = True) -> int:
    """The recorded tie of a greedy token whose logit led the next best by `lead`,
    chosen by a decode of `rows` rows; `exact`: every decode that chose a token of its
    answer so far, this one included, was exact (`exact_decode`)."""
    flag = 0 if exact else INEXACT
    if lead >= TILED_NEAR_TIE:
        return ANY | flag
    decode_shape = shape(rows)
    if decode_shape == TILED:
        return RISKY | flag
    if lead >= NEAR_TIE:
        return NEAR | flag
    return (FEW_TIE if decode_shape == FEW else RISKY) | flag


def settle(ties: Sequence[int], confirmed: bool, exact: bool = True) -> list[int]:
    """The ties by which to draft a recalled greedy answer (`exact_length`) from its
    recorded ones: as its decodes chose them, but that a near-tie of an answer not
    confirmed is `RISKY` where the answer's KV was written otherwise than exactly, or
    where the repeat's is not `exact` so far (see the module doc)."""
    if confirmed:
        return [t & BASE for t in ties]
    return [RISKY if t & BASE != ANY and (t & INEXACT or not exact) else t & BASE for t in ties]


def holds(tie: int, decode_shape: int) -> bool:
    """Whether a token with `tie` is chosen again by a decode of `decode_shape`."""
    if tie == ANY:
        return True
    if tie == FEW_TIE:
        return decode_shape == FEW
    return tie == NEAR and decode_shape != TILED


def exact_length(ties: Sequence[int], rows: int, limit: int) -> int:
    """The longest draft, at most `limit` tokens, of a recalled greedy answer whose next
    tokens have `ties` (the first draft token's first; one more than the draft: the
    token sampled after it; past its end, `ANY`), such that a decode of `rows` rows
    besides the draft decides every one of them in a shape where it holds, but for a
    `RISKY` one sampled after the draft. 0 when no draft does (the next token is then
    decided by a decode without one)."""
    risky = next((j for j, t in enumerate(ties) if t == RISKY), limit)
    best = 0
    for s, least, most in ((FEW, 2, TILE_ROWS - 1), (TILED, TILE_ROWS, None)):
        # The drafts k with rows + k rows in shape s; a draft of k decides tokens 0..k.
        lo = max(1, least - rows)
        hi = min(risky, limit if most is None else min(limit, most - rows))
        if hi < max(lo, best + 1):
            continue
        miss = next((j for j, t in enumerate(ties) if t != RISKY and not holds(t, s)), hi + 1)
        k = min(hi, miss - 1)
        if k >= lo:
            best = k
    return best
