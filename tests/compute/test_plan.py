"""The compute plan's pure policy (issue 21): busy backends and cores -> shares."""

from __future__ import annotations

import pytest

from juggler.compute.plan import (
    OFFLOADED_THREADS,
    Consumer,
    Share,
    divide,
    plan_shares,
    split_threads,
)

TWO = (0, 1)
EIGHT = tuple(range(8))


def test_nothing_busy_every_backend_may_use_every_core() -> None:
    shares = plan_shares([Consumer(1, False), Consumer(2, False)], EIGHT)
    assert shares == {1: Share(8, EIGHT), 2: Share(8, EIGHT)}


def test_a_lone_busy_model_always_gets_every_core() -> None:
    """Issue 21: "A lone busy model always gets every core." """
    shares = plan_shares([Consumer(1, True), Consumer(2, False)], EIGHT)
    assert shares[1] == Share(8, EIGHT, busy=True)
    assert shares[2].threads == 1  # idle beside a busy one: upkeep only


def test_two_busy_models_divide_the_cores_into_disjoint_halves() -> None:
    """Issue 21: "When a second becomes busy, the cores are divided between them (equal
    shares by default)"."""
    shares = plan_shares([Consumer(1, True), Consumer(2, True)], EIGHT)
    assert shares[1] == Share(4, (0, 1, 2, 3), busy=True)
    assert shares[2] == Share(4, (4, 5, 6, 7), busy=True)
    two = plan_shares([Consumer(7, True), Consumer(3, True)], TWO)
    assert two[3].cpus == (0,) and two[7].cpus == (1,)
    assert two[3].threads == two[7].threads == 1


def test_when_one_goes_idle_the_other_gets_the_cores_back() -> None:
    both = plan_shares([Consumer(1, True), Consumer(2, True)], TWO)
    assert both[1].threads == 1
    alone = plan_shares([Consumer(1, True), Consumer(2, False)], TWO)
    assert alone[1] == Share(2, TWO, busy=True)


def test_three_busy_on_eight_cores_never_use_more_threads_than_cores() -> None:
    shares = plan_shares([Consumer(k, True) for k in (1, 2, 3)], EIGHT)
    assert [shares[k].threads for k in (1, 2, 3)] == [3, 3, 2]
    used = [c for k in (1, 2, 3) for c in shares[k].cpus]
    assert sorted(used) == list(EIGHT)  # disjoint and complete


def test_more_busy_models_than_cores_share_them_in_time_with_one_thread_each() -> None:
    """Issue 21: "When busy models outnumber the cores (three on two), whole cores cannot
    be divided and shares must be made of time." """
    shares = plan_shares([Consumer(k, True) for k in (1, 2, 3)], TWO)
    assert all(shares[k] == Share(1, TWO, busy=True) for k in (1, 2, 3))


def test_weights_give_priority() -> None:
    shares = plan_shares([Consumer(1, True, weight=3.0), Consumer(2, True)], EIGHT)
    assert (shares[1].threads, shares[2].threads) == (6, 2)


def test_explicit_threads_are_outside_the_division_and_the_rest_divide_what_is_left() -> None:
    """Issue 21: "an explicit threads in a model's options is respected (that model is then
    outside the division ...)"."""
    shares = plan_shares(
        [Consumer(1, True, fixed_threads=2), Consumer(2, True), Consumer(3, True)], EIGHT
    )
    assert shares[1] == Share(2, EIGHT, busy=True, fixed=True)
    assert shares[2].threads + shares[3].threads == 6
    assert set(shares[2].cpus) | set(shares[3].cpus) == set(range(6))
    # An idle fixed model reserves nothing.
    idle_fixed = plan_shares([Consumer(1, False, fixed_threads=4), Consumer(2, True)], EIGHT)
    assert idle_fixed[2].threads == 8
    # A fixed model asking for every core still leaves one to the rest.
    greedy = plan_shares([Consumer(1, True, fixed_threads=16), Consumer(2, True)], TWO)
    assert greedy[2] == Share(1, (0,), busy=True)


def test_the_plan_off_gives_every_backend_every_core() -> None:
    shares = plan_shares([Consumer(1, True), Consumer(2, True)], TWO, enabled=False)
    assert shares == {1: Share(2, TWO, True, fixed=True), 2: Share(2, TWO, True, fixed=True)}


def test_divide_and_split() -> None:
    assert divide(8, [1, 1, 1]) == [3, 3, 2]
    assert divide(2, [1, 1]) == [1, 1]
    assert divide(5, [1]) == [5]
    assert sum(divide(7, [0.5, 2, 1])) == 7
    with pytest.raises(ValueError):
        divide(1, [1, 1])
    assert split_threads(8, 3) == [3, 3, 2]
    assert split_threads(1, 2) == [1, 1]  # fewer threads than workers: one each, in time
    assert split_threads(4, 0) == []


def test_a_fully_offloaded_model_gets_one_thread_and_its_own_core_while_busy() -> None:
    """Issue 48: "A fully offloaded model gets the few CPU threads it needs, a partially
    offloaded one is divided like a CPU model" (the plan gave it `16 on 0-15`)."""
    shares = plan_shares([Consumer(1, True, offloaded=True), Consumer(2, True)], EIGHT)
    assert shares[1] == Share(OFFLOADED_THREADS, (7,), busy=True, gpu=True)
    assert shares[2] == Share(7, tuple(range(7)), busy=True)  # the CPU model: the rest
    alone = plan_shares([Consumer(1, True, offloaded=True)], EIGHT)
    assert alone[1].threads == OFFLOADED_THREADS
    # Two GPU models each reserve a core while busy; idle, one reserves nothing.
    two = plan_shares(
        [Consumer(1, True, offloaded=True), Consumer(2, True, offloaded=True), Consumer(3, True)],
        EIGHT,
    )
    assert {two[1].cpus, two[2].cpus} == {(7,), (6,)} and two[3].cpus == tuple(range(6))
    idle = plan_shares([Consumer(1, False, offloaded=True), Consumer(2, True)], EIGHT)
    assert idle[1].threads == OFFLOADED_THREADS and idle[2] == Share(8, EIGHT, busy=True)
    # Never the pool's last core: on two cores the CPU model keeps one.
    small = plan_shares(
        [Consumer(1, True, offloaded=True), Consumer(2, True, offloaded=True), Consumer(3, True)],
        TWO,
    )
    assert small[3] == Share(1, (0,), busy=True) and small[1].cpus == small[2].cpus == (1,)


def test_a_partly_offloaded_model_is_divided_like_a_cpu_model() -> None:
    shares = plan_shares([Consumer(1, True, offloaded=False), Consumer(2, True)], EIGHT)
    assert shares[1].threads == shares[2].threads == 4
