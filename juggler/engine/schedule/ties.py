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

Where one-row decodes wrote an answer's KV, that holds less: every later token attends
to those cells. Measured (`bench/bench_ties.py`, ten grounded answers after 850 to
1,400 prompt tokens): decodes of 2 to 63 rows give bit-identical logits whatever their
row count, and so does a single row while the cells in use are at most 256 (llama.cpp
then attends over 256 cells and does not split them); a single row over more cells, or
a tiled decode, moved a token's lead by 0.1 at the median and by up to 1.22, whether it
chose the token or only wrote the tokens before it, and the few-row decodes parted from
the one-row answer where it led by up to 0.131. Leaving every near-tie of an answer so
written to the row after a draft was tried, and measured worse (`bench_spec.py --rounds
3 --levels 1`, twice each way, interleaved: table's second repeat and code's first came
out otherwise each time, 140-152 decodes, where the ties above kept them whole in 3 to
5): a near-tie that a decode of a few rows chose is chosen again by one, not by the
lone row that decides a near-tie next to the draft. So the ties stay as above.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: The decode shapes whose rounding differs (see the module doc): one row, 2 to 63 rows,
#: and from `TILE_ROWS` rows on.
ONE, FEW, TILED = 0, 1, 2
TILE_ROWS = 64
#: A token's tie: given again by a decode of any shape; only by one of 2 to 63 rows;
#: by any but a tiled one; by none for sure.
ANY, FEW_TIE, NEAR, RISKY = -1, 0, 1, 2
#: Leads under this part between the one-row shape and the few-row one (measured: up to
#: 0.063 after 700 cells, 0.131 after 850 to 1,400); between the tiled shape and
#: another, leads under `TILED_NEAR_TIE` do (measured: up to 0.29).
NEAR_TIE = 0.1
TILED_NEAR_TIE = 0.35


def shape(rows: int) -> int:
    """The shape of a decode of `rows` rows (all sequences' rows together)."""
    return ONE if rows <= 1 else FEW if rows < TILE_ROWS else TILED


def tie_of(lead: float, rows: int) -> int:
    """The tie of a greedy token whose logit led the next best by `lead`, chosen by a
    decode of `rows` rows."""
    if lead >= TILED_NEAR_TIE:
        return ANY
    decode_shape = shape(rows)
    if decode_shape == TILED:
        return RISKY
    if lead >= NEAR_TIE:
        return NEAR
    return FEW_TIE if decode_shape == FEW else RISKY


def holds(tie: int, decode_shape: int) -> bool:
    """Whether a token with `tie` is chosen again by a decode of `decode_shape`."""
    if tie == ANY:
        return True
    if tie == FEW_TIE:
        return decode_shape == FEW
    return tie == NEAR and decode_shape != TILED


def _exact_ranges(ties: Sequence[int], rows: int, limit: int) -> list[tuple[int, int]]:
    """The drafts of at most `limit` tokens that `exact_length` allows, as a range of
    lengths per decode shape (few rows, tiled; each non-empty)."""
    risky = next((j for j, t in enumerate(ties) if t == RISKY), limit)
    ranges = []
    for s, least, most in ((FEW, 2, TILE_ROWS - 1), (TILED, TILE_ROWS, None)):
        # The drafts k with rows + k rows in shape s; a draft of k decides tokens 0..k.
        lo = max(1, least - rows)
        hi = min(risky, limit if most is None else min(limit, most - rows))
        if hi < lo:
            continue
        miss = next((j for j, t in enumerate(ties) if t != RISKY and not holds(t, s)), hi + 1)
        k = min(hi, miss - 1)
        if k >= lo:
            ranges.append((lo, k))
    return ranges


def exact_length(ties: Sequence[int], rows: int, limit: int) -> int:
    """The longest draft, at most `limit` tokens, of a recalled greedy answer whose next
    tokens have `ties` (the first draft token's first; one more than the draft: the
    token sampled after it; past its end, `ANY`), such that a decode of `rows` rows
    besides the draft decides every one of them in a shape where it holds, but for a
    `RISKY` one sampled after the draft. 0 when no draft does (the next token is then
    decided by a decode without one)."""
    return max((hi for _, hi in _exact_ranges(ties, rows, limit)), default=0)


#: The near-ties `planned_length` weighs ending the draft at, nearest first.
PLAN_BREAKS = 16


def planned_length(
    ties: Sequence[int],
    rows: int,
    limit: int,
    total: int,
    next_limit: int,
    seconds: Callable[[int], float],
) -> int:
    """For a repeat that a lone stream drafts as far as it holds: the draft, exact as
    `exact_length`'s and at most `limit` tokens, that together with the longest exact
    draft after it yields the answer's tokens fastest. `total`: the tokens of the
    answer the recall holds from the first draft token on; `next_limit`: the bound of
    the next draft; `seconds(n)`: the time of a decode of n rows.

    The longest exact draft is not always the best one. A near-tie that holds in a few
    rows but not in a tiled decode keeps every decode that decides it under
    `TILE_ROWS` rows, and on a CPU such decodes cost more a row (2 cores, SmolLM2, 900
    cells: 63 rows 231 ms, 64 rows 184, 128 rows 343). Records asked again, with
    near-ties at its seventh and eighth tokens, was decoded as 2 + 63 + 96 rows (581-612
    ms in `bench/bench_spec.py`); a draft that ends at the near-ties lets the next one
    tile: 2 + 8 + 129 + 22 rows (526-555 ms). So each draft that ends at one of its next
    near-ties (or at the longest its shape allows, or halfway through what is left) is
    weighed with the decode after it."""
    ranges = _exact_ranges(ties, rows, min(limit, total))
    if not ranges:
        return 0
    candidates: set[int] = set()
    for lo, hi in ranges:
        candidates.add(hi)
        breaks = (j for j in range(lo, min(hi, len(ties) - 1) + 1) if ties[j] != ANY)
        candidates.update(j for _, j in zip(range(PLAN_BREAKS), breaks, strict=False))
        # The rest in two even decodes, or this one as short as lets the next take all
        # the rest: 151 tokens as 76 + 75 rows, both tiled, not 129 + 22.
        candidates.update(k for k in ((total - 1) // 2, total - 1 - next_limit) if lo <= k <= hi)
    best, best_rate = 0, 0.0
    for k in sorted(candidates):
        made, took = k + 1, seconds(rows + k)
        left = total - made
        if left > 0:
            after = exact_length(ties[made:], 1, min(next_limit, left))
            made += after + 1
            took += seconds(1 + after)
        rate = made / took
        if rate >= best_rate * (1.0 - 1e-9):  # on a tie (up to rounding), the longer
            best, best_rate = k, rate
    return best
