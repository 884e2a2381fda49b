"""Pure prefix-reuse policy for stateless requests."""

from __future__ import annotations

from juggler.engine.cache.parking import Parked, ParkedStore
from juggler.engine.cache.prefix_cache import (
    MIN_SHARED,
    CachedSeq,
    Reuse,
    best_affinity,
    cache_budget,
    choose_evictions,
    choose_reuse,
    choose_share,
    common_prefix_len,
    most_kept,
    over_budget,
    prefix_keys,
    worth_reusing,
)
from juggler.engine.schedule.batch import FINAL_ROWS


def test_common_prefix_len() -> None:
    assert common_prefix_len([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len([1, 2], [1, 2, 3]) == 2


def test_longest_shared_prefix_wins() -> None:
    cached = [CachedSeq(0, (1, 2, 3, 9), 5), CachedSeq(1, (1, 2, 3, 4, 5), 1)]
    assert choose_reuse(cached, [2, 3], [1, 2, 3, 4, 5, 6]) == Reuse(1, 4)


def test_the_last_two_prompt_tokens_are_decoded_again() -> None:
    """Decoded by two rows, as few-row decodes are exact (`schedule.batch.FINAL_ROWS`):
    a greedy answer asked again is chosen on the same KV as the first time."""
    cached = [CachedSeq(0, (1, 2, 3, 4), 1)]
    assert choose_reuse(cached, [], [1, 2, 3, 4]) == Reuse(0, 4 - FINAL_ROWS)
    assert choose_reuse(cached, [], [1]) == Reuse(0, 0)
    # The one rule for the cached, parked and shared paths: never below nothing.
    assert [most_kept(n) for n in (0, 1, 2, 3, 40)] == [0, 0, 0, 1, 40 - FINAL_ROWS]


def test_no_shared_prefix_takes_a_free_sequence_before_recycling_the_lru() -> None:
    cached = [CachedSeq(0, (7, 8), 5), CachedSeq(1, (9,), 2)]
    assert choose_reuse(cached, [4], [1, 2]) == Reuse(4, 0)
    assert choose_reuse(cached, [], [1, 2]) == Reuse(1, 0)
    assert choose_reuse([], [4, 5], [1, 2]) == Reuse(4, 0)


def test_a_short_shared_prefix_does_not_cost_a_cached_sequence_its_tail() -> None:
    cached = [CachedSeq(0, (1, 2, 3, 4, 5, 6), 5)]
    # One shared token of six: a free key keeps the cached sequence whole.
    assert choose_reuse(cached, [4], [1, 9, 9]) == Reuse(4, 0)
    # Half or more shared: taking it over is worth the tail it loses.
    assert choose_reuse(cached, [4], [1, 2, 3, 4, 9]) == Reuse(0, 3)
    # No free key left: any shared prefix beats starting from nothing.
    assert choose_reuse(cached, [], [1, 9, 9]) == Reuse(0, 1)


def test_a_prompt_asked_again_replaces_its_earlier_answer() -> None:
    """A 41-token story prompt asked again kept each earlier 160-token answer beside the
    new one: every decode attended over 200 more cells (n_kv 512 instead of 256, about
    2% a token on SmolLM2), where llama-server reuses its slot."""
    story = CachedSeq(0, (*range(41), *range(500, 660)), 5)
    assert choose_reuse([story], [4], range(41)) == Reuse(0, 39)
    # A prompt that leaves the cached sequence early still keeps it whole.
    assert choose_reuse([story], [4], (*range(40), 7)) == Reuse(4, 0)
    # Longer than the cached sequence: a conversation going on, as before.
    assert choose_reuse([story], [4], (*story.tokens, 9)) == Reuse(0, 200)


def test_a_prefix_is_shared_from_the_sequence_holding_the_most_of_it() -> None:
    doc = tuple(range(100, 200))
    holders = [
        CachedSeq(0, (*doc[:70], 1, 2), 5),
        CachedSeq(1, (*doc, 7, 7), 1),  # running, say: holders need not be cached
        CachedSeq(2, (*doc, 8), 9, adapter="lora-a"),  # another adapter's KV: never
    ]
    prompt = (*doc, 3, 4)
    assert choose_share(holders, prompt, None, better_than=0) == Reuse(1, 100)
    assert choose_share(holders, prompt, "lora-a", better_than=0) == Reuse(2, 100)
    # Not worth it: what the prompt's own sequence keeps is as long, or the prefix short.
    assert choose_share(holders, prompt, None, better_than=100) == Reuse(None, 0)
    assert choose_share(holders, (*doc[:5], 5, 6, 7), None, better_than=0) == Reuse(None, 0)
    # A system prompt's worth is shared, and so is all of a short prompt.
    assert choose_share(holders, (*doc[:40], 5), None, better_than=0) == Reuse(0, 40)
    assert choose_share(holders, doc[:3], None, better_than=0) == Reuse(0, 3)


def test_a_short_prompt_asked_again_reuses_all_but_its_last_token() -> None:
    """A 41-token story prompt asked again was prefilled anew every time (118 ms of a
    1.4 s answer on SmolLM2): 40 shared tokens were under the 64 that counted as useful."""
    assert worth_reusing(64, 1000) and not worth_reusing(7, 1000)
    assert worth_reusing(MIN_SHARED, 1000)  # a system prompt, a template's header
    assert worth_reusing(40, 41) and worth_reusing(3, 4)  # all but the last token
    assert not worth_reusing(3, 5) and not worth_reusing(0, 1)
    store = ParkedStore(max_cells=10_000)
    story = Parked(tuple(range(201)), state=b"s", last_used=1)  # prompt 41 + answer 160
    store.add(story)
    found = store.best([*range(40), 7], better_than=0)
    assert found is not None and found == (story, 40)
    # A restore copies the whole entry: a short prefix of a long conversation is not one.
    store.take(story)
    store.add(Parked((*range(40), *range(1000, 3000)), state=b"c", last_used=2))
    assert store.best([*range(40), 7], better_than=0) is None
    assert store.best([*range(40), *range(1000, 1100)], better_than=0) is not None


def test_cached_cells_are_capped_lru_first_sparing_the_newest() -> None:
    cached = [CachedSeq(0, (1,) * 10, 3), CachedSeq(1, (1,) * 10, 1), CachedSeq(2, (1,) * 10, 9)]
    assert over_budget(cached, 30, keep=2) == []
    assert over_budget(cached, 15, keep=2) == [1, 0]
    assert over_budget(cached, 5, keep=2) == [1, 0]
    assert over_budget(cached, 25, keep=1) == [0]


def test_everything_busy_means_wait() -> None:
    assert choose_reuse([], [], [1, 2]) == Reuse(None, 0)


def test_evictions_are_lru_until_enough_cells() -> None:
    cached = [CachedSeq(0, (1,) * 10, 3), CachedSeq(1, (1,) * 10, 1), CachedSeq(2, (1,) * 10, 2)]
    assert choose_evictions(cached, 15) == [1, 2]
    assert choose_evictions(cached, 0) == []


def test_prefix_keys_chain_and_affinity() -> None:
    a = list(range(200))
    b = [*range(128), *range(1000, 1072)]
    ka, kb = prefix_keys(a, 64), prefix_keys(b, 64)
    assert len(ka) == 4 and ka[:2] == kb[:2] and ka[2] != kb[2]  # 3 blocks and the rest
    owners = {ka[0]: 1, ka[1]: 1, ka[2]: 1, ka[3]: 1}
    assert best_affinity(kb, owners) == 1
    assert best_affinity(prefix_keys(list(range(5000, 5100)), 64), owners) is None
    # A short prompt has one key, its own: asked again it goes where it went.
    short = prefix_keys(list(range(10)), 64)
    assert len(short) == 1 and best_affinity(short, {short[0]: 0}) == 0
    assert prefix_keys(list(range(128)), 64) == ka[:2]  # ends at a block's end


def test_the_cache_keeps_its_budget_only_while_requests_hit_it() -> None:
    assert cache_budget(1024, [False, True, False]) == 1024
    assert cache_budget(1024, [False] * 16) == 0
    assert cache_budget(1024, []) == 0
    # A zero budget still keeps the sequence that finished last.
    cached = [CachedSeq(0, (1,) * 50, 1), CachedSeq(1, (2,) * 50, 2), CachedSeq(2, (3,) * 9, 3)]
    assert sorted(over_budget(cached, cache_budget(1024, [False]), keep=2)) == [0, 1]


def test_parked_store_keeps_its_cell_budget_lru_first_and_finds_the_longest_prefix() -> None:
    store = ParkedStore(max_cells=300)
    a = Parked(tuple(range(100)), state=b"a", last_used=1)
    b = Parked(tuple(range(150)), state=b"b", last_used=2)
    store.add(a)
    store.add(b)
    assert store.cells == 250
    prompt = [*range(120), 999]
    found = store.best(prompt, better_than=0)
    assert found is not None and found[0] is b and found[1] == 120
    assert store.best(prompt, better_than=120) is None, "the KV cache already offers as much"
    assert store.best([5, 6, 7], better_than=0) is None, "no shared prefix"
    store.add(Parked(tuple(range(1000, 1100)), state=b"c", last_used=3))
    assert a not in store.entries and store.cells == 250, "least recently used went first"
    store.add(Parked(tuple(range(400)), state=b"d", last_used=4))
    assert store.cells == 250, "an entry bigger than the whole budget is not kept"
    store.take(b)
    assert store.cells == 100
