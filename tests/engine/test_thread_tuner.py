"""How many threads a worker decodes with (issue 47): the count that measured fastest,
fewer unless more are clearly faster, and every so often another count is tried so the
choice follows the machine's load."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from juggler.engine.worker.context_slot import ContextSlot
from juggler.engine.worker.thread_tuner import (
    EXPLORE_EVERY,
    MAX_EXPLORE_EVERY,
    MIN_SAMPLES,
    WARM_UP,
    WINDOW,
    ThreadTuner,
    candidates,
    key_of,
    size_of,
)


def run(tuner: ThreadTuner, n_max: int, rows: int, cost: dict[int, float], n: int) -> list[int]:
    """`n` decodes whose time with each thread count is `cost`; the counts chosen."""
    chosen = []
    for _ in range(n):
        t = tuner.choose(n_max, rows)
        chosen.append(t)
        tuner.observe(t, rows, cost[t])
    return chosen


def starts(chosen: list[int], n: int, after: int) -> list[int]:
    """Where each run of `n` threads in `chosen` begins, past index `after`."""
    return [i for i, t in enumerate(chosen) if t == n and i > after and chosen[i - 1] != n]


def test_the_counts_tried_are_all_half_and_one() -> None:
    assert candidates(1) == (1,)
    assert candidates(2) == (1, 2)
    assert candidates(16) == (1, 8, 16)
    assert [size_of(r) for r in (1, 2, 3, 4, 64, 100, 10_000)] == [1, 2, 2, 3, 7, 7, 10]


def test_one_thread_wins_where_two_wait_for_each_other() -> None:
    """A busy machine: two threads took 1.4-2.8 ms a row, one 0.59 ms."""
    tuner = ThreadTuner()
    chosen = run(tuner, 2, 1, {1: 0.00059, 2: 0.0021}, 500)
    steady = chosen[2 * MIN_SAMPLES :]
    assert steady.count(1) >= len(steady) * (1 - (WARM_UP + 1.5) / EXPLORE_EVERY)
    assert 2 in steady  # still tried now and then


def test_more_threads_win_only_when_clearly_faster_and_per_decode_size() -> None:
    tuner = ThreadTuner()
    # Big decodes: two threads take 60% of one's time; small ones: 95% (not worth it).
    big = run(tuner, 2, 64, {1: 0.010, 2: 0.006}, 200)[2 * MIN_SAMPLES :]
    small = run(tuner, 2, 1, {1: 0.0010, 2: 0.00095}, 200)[2 * MIN_SAMPLES :]
    assert big.count(2) > 0.9 * len(big)
    assert small.count(1) > 0.9 * len(small)


def test_the_choice_follows_the_load_as_it_changes() -> None:
    tuner = ThreadTuner()
    run(tuner, 2, 8, {1: 0.004, 2: 0.002}, 200)
    assert tuner.choose(2, 8) == 2
    # Another process takes a core: two threads now wait at every barrier.
    later = run(tuner, 2, 8, {1: 0.004, 2: 0.012}, 20 * EXPLORE_EVERY)
    assert later[-EXPLORE_EVERY // 2 :].count(1) >= EXPLORE_EVERY // 2 - 1


def test_a_single_thread_limit_is_kept() -> None:
    tuner = ThreadTuner()
    assert run(tuner, 1, 4, {1: 0.001}, 10) == [1] * 10


def test_a_counts_slow_first_decode_does_not_keep_it_away() -> None:
    """A count's first decode starts its threads (SmolLM2, one row: two threads' first
    decode took tens of milliseconds, then 8 ms against one thread's 13 ms). The median
    leaves that outlier out: two threads are chosen as soon as each count was heard."""
    tuner = ThreadTuner()
    first = {2: True}

    chosen = []
    for _ in range(40):
        t = tuner.choose(2, 1)
        chosen.append(t)
        slow = t == 2 and first.pop(2, False)
        tuner.observe(t, 1, 0.050 if slow else {1: 0.013, 2: 0.008}[t])
    assert chosen[2 * MIN_SAMPLES :].count(2) == len(chosen) - 2 * MIN_SAMPLES


def test_a_try_that_wins_is_tried_again_at_once() -> None:
    """When the load lifts, the count that now wins takes over within a few decodes of
    its first try, not after several rounds of EXPLORE_EVERY."""
    tuner = ThreadTuner()
    run(tuner, 2, 1, {1: 0.004, 2: 0.012}, 200)  # busy: one thread
    assert tuner.choose(2, 1) == 1
    later = run(tuner, 2, 1, {1: 0.004, 2: 0.002}, MAX_EXPLORE_EVERY + 8)
    first = later.index(2)
    settled = first + WARM_UP + WINDOW
    assert later[first:settled] == [2] * (WARM_UP + WINDOW)  # its warm-up and retries
    assert later[settled:].count(1) <= (WARM_UP + 1) * (1 + len(later) // EXPLORE_EVERY)


def test_tries_that_keep_losing_come_less_and_less_often() -> None:
    """Trying two threads starts OpenMP's helper, which spins for milliseconds on a core
    the event loop, router and client need (a lone streamed client on the host-bound
    model: a third of a core with a try every 64 decodes). A try that loses doubles the
    wait before the next, up to MAX_EXPLORE_EVERY; a change of choice listens closely
    again."""
    tuner = ThreadTuner()
    chosen = run(tuner, 2, 1, {1: 0.001, 2: 0.003}, 8 * MAX_EXPLORE_EVERY)
    tries = starts(chosen, 2, after=2 * MIN_SAMPLES)
    # A try: its first decodes wake its threads and are left out, the next one loses.
    assert all(chosen[i : i + WARM_UP + 2] == [2] * (WARM_UP + 1) + [1] for i in tries[:-1])
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert gaps[:4] == [EXPLORE_EVERY, 2 * EXPLORE_EVERY, 4 * EXPLORE_EVERY, 8 * EXPLORE_EVERY]
    assert max(gaps) == MAX_EXPLORE_EVERY and gaps[-1] == MAX_EXPLORE_EVERY
    # The load changes: one thread now waits for a core, two do not.
    later = run(tuner, 2, 1, {1: 0.004, 2: 0.001}, 2 * MAX_EXPLORE_EVERY)
    assert later[-MAX_EXPLORE_EVERY // 2 :].count(2) >= MAX_EXPLORE_EVERY // 2 - WARM_UP - 2
    settled = later.index(2, later.index(1) + 1) + WARM_UP + WINDOW  # the try that won
    tries_of_one = starts(later, 1, after=settled)
    assert tries_of_one[0] - settled <= EXPLORE_EVERY  # heard from again soon
    gaps = [b - a for a, b in itertools.pairwise(tries_of_one)]
    assert gaps[:3] == [EXPLORE_EVERY, 2 * EXPLORE_EVERY, 4 * EXPLORE_EVERY]  # then less often


def test_a_count_tried_is_marked_a_trial_and_the_chosen_one_is_not() -> None:
    """The worker prices speculative drafts only from decodes run with the chosen count
    (`ThreadTuner.trial`): the first decodes of a size, tries and retries are trials."""
    tuner = ThreadTuner()
    cost = {1: 0.004, 2: 0.002}
    trials = []
    for _ in range(4 * EXPLORE_EVERY):
        t = tuner.choose(2, 1)
        trials.append((t, tuner.trial))
        tuner.observe(t, 1, cost[t])
    assert all(trial for _, trial in trials[: 2 * MIN_SAMPLES])  # each count heard first
    steady = trials[2 * MIN_SAMPLES :]
    assert all(not trial for t, trial in steady if t == 2)
    assert all(trial for t, trial in steady if t == 1)  # the tries of one thread
    assert any(t == 1 for t, _ in steady)
    one = ThreadTuner()
    assert one.choose(1, 8) == 1 and not one.trial  # nothing to choose from


def test_a_try_is_judged_once_its_threads_are_awake() -> None:
    """A try of two threads after a stretch of one wakes OpenMP's helper: measured on 2
    cores (host-bound model, one client), its first decodes took 430-560 us against one
    thread's 410, then 320-340. Judged by its first decode, two threads never won; its
    first WARM_UP decodes are left out, and two threads take over."""
    tuner = ThreadTuner()
    last = [0]
    chosen = []

    def cost(t: int) -> float:
        warm = last[0] == t
        last[0] = t
        return {1: 0.00041, 2: 0.00033 if warm else 0.00056}[t]

    for i in range(4 * EXPLORE_EVERY):
        t = tuner.choose(2, 1)
        chosen.append(t)
        # Until the tuner has heard both counts, two threads run cold (one stretch of one
        # thread first): what a worker that started on one thread saw.
        tuner.observe(t, 1, 0.00056 if t == 2 and i < MIN_SAMPLES * 2 else cost(t))
    assert chosen[-EXPLORE_EVERY:].count(2) >= EXPLORE_EVERY - WARM_UP - 2


def test_a_try_between_decodes_of_another_size_is_still_judged() -> None:
    """Every decode switches counts when two sizes alternate with different choices;
    a try's warm-up is bounded, so the try is judged all the same."""
    tuner = ThreadTuner()
    for _ in range(8 * EXPLORE_EVERY):
        for rows, cost in ((64, {1: 0.010, 2: 0.005}), (1, {1: 0.001, 2: 0.003})):
            t = tuner.choose(2, rows)
            tuner.observe(t, rows, cost[t])
    assert tuner.chosen == {key_of(64, False): 2, key_of(1, False): 1}
    judged = tuner.stats[(key_of(1, False), 2)].samples
    assert judged >= MIN_SAMPLES + 3  # the first decodes, then tries judged


def test_streamed_and_unstreamed_decodes_are_timed_apart() -> None:
    """A streamed answer's host work (the event loop, the router, the client) runs
    beside the next decode; two threads then wait for the core it takes, where an
    unstreamed answer's decodes had it to themselves. Each kind keeps its own times."""
    tuner = ThreadTuner()
    for _ in range(300):
        for streamed, cost in ((False, {1: 0.00041, 2: 0.00033}), (True, {1: 0.00038, 2: 0.0005})):
            t = tuner.choose(2, 1, streamed)
            tuner.observe(t, 1, cost[t], streamed)
    assert tuner.choose(2, 1, streamed=False) == 2
    assert tuner.choose(2, 1, streamed=True) == 1


def test_an_unstreamed_decode_costs_its_cycle_and_a_streamed_one_its_own_time() -> None:
    """`ContextSlot` tells the tuner what a decode cost: an unstreamed one, the time to
    the next decode's start (sampling and the worker's bookkeeping are part of every
    token's cost, and more threads spinning between decodes slow them); a decode with
    no other at once after it (`settle`: the worker waits for work), its own time; a
    streamed one, its own time at once (what follows it is the stream's host work)."""
    now = [0.0]

    class Ctx:
        n_ctx = 64
        num_removals = 0

        def set_threads(self, n: int) -> None:
            pass

        def decode(self, batch: object) -> int:
            now[0] += 0.001
            return 0

        def close(self) -> None:
            pass

    ctx = Ctx()
    slot = ContextSlot(lambda: ctx, lambda: 2, tune=True, clock=lambda: now[0])  # type: ignore[arg-type,return-value]
    assert slot.tuner is not None
    seen: list[tuple[int, float, bool]] = []
    slot.tuner.observe = lambda n, rows, s, streamed=False: seen.append(  # type: ignore[method-assign]
        (rows, round(s, 6), streamed)
    )
    one, eight = SimpleNamespace(n_tokens=1), SimpleNamespace(n_tokens=8)
    slot.decode(one)  # type: ignore[arg-type]
    assert seen == []  # open until the next decode starts
    now[0] += 0.0005  # sampling, bookkeeping
    slot.decode(eight)  # type: ignore[arg-type]
    assert seen == [(1, 0.0015, False)]
    now[0] += 0.002
    slot.settle()
    assert seen[-1] == (8, 0.001, False)  # the wait is not its cost
    now[0] += 0.003
    slot.decode(one, streamed=True)  # type: ignore[arg-type]
    assert seen[-1] == (1, 0.001, True)
    now[0] += 0.0005
    slot.decode(one)  # type: ignore[arg-type]
    slot.settle()
    assert seen[-2:] == [(1, 0.001, True), (1, 0.001, False)]


def test_a_streamed_try_is_judged_by_its_first_decode() -> None:
    """Between a stream's decodes its host work (the event loop, the router, the client)
    takes the cores, so each streamed decode with two threads wakes the helper again:
    the first decode of a try is what every one costs. A streamed try is one decode;
    judged warm, two threads were chosen more often and a lone stream lost."""
    tuner = ThreadTuner()
    chosen = run_streamed(tuner, {1: 0.00038, 2: 0.0005}, 4 * MAX_EXPLORE_EVERY)
    tries = starts(chosen, 2, after=2 * MIN_SAMPLES)
    assert len(tries) >= 4
    assert all(chosen[i : i + 2] == [2, 1] for i in tries[:-1])  # one decode each
    unstreamed = ThreadTuner()
    chosen = run(unstreamed, 2, 1, {1: 0.00038, 2: 0.0005}, 4 * MAX_EXPLORE_EVERY)
    tries = starts(chosen, 2, after=2 * MIN_SAMPLES)
    assert all(chosen[i : i + WARM_UP + 2] == [2] * (WARM_UP + 1) + [1] for i in tries[:-1])


def run_streamed(tuner: ThreadTuner, cost: dict[int, float], n: int) -> list[int]:
    chosen = []
    for _ in range(n):
        t = tuner.choose(2, 1, streamed=True)
        chosen.append(t)
        tuner.observe(t, 1, cost[t], streamed=True)
    return chosen
