"""Automatic engine workers (`workers: 0`, issue 47): two contexts where the device is
fast for the model, one where a second would read every weight twice a step."""

from __future__ import annotations

from juggler.compute.workers import AUTO_WORKERS, SMALL_MODEL_BYTES, auto_workers, workers_for

SMOL = 145 * 1024 * 1024
BIG = 5 * 1024**3


def test_a_small_text_model_on_two_cores_gets_two_workers() -> None:
    assert auto_workers(SMOL, is_llm=True, offloaded=False, cores=2) == AUTO_WORKERS == 2
    assert auto_workers(SMALL_MODEL_BYTES, is_llm=True, offloaded=False, cores=16) == 2


def test_a_large_model_on_the_cpu_gets_one_but_offloaded_it_gets_two() -> None:
    assert auto_workers(BIG, is_llm=True, offloaded=False, cores=16) == 1
    assert auto_workers(BIG, is_llm=True, offloaded=True, cores=16) == 2


def test_one_core_an_unknown_size_or_an_embedding_model_get_one() -> None:
    assert auto_workers(SMOL, is_llm=True, offloaded=False, cores=1) == 1
    assert auto_workers(None, is_llm=True, offloaded=False, cores=8) == 1
    assert auto_workers(SMOL, is_llm=False, offloaded=False, cores=8) == 1


def test_an_explicit_count_is_kept() -> None:
    assert workers_for(3, BIG, is_llm=True, offloaded=False, cores=2) == 3
    assert workers_for(0, SMOL, is_llm=True, offloaded=False, cores=2) == 2
