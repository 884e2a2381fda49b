"""The LogBook behind the dashboard's Logs page and GET /api/v1/logs: bounded rings of
recent lines per source, read incrementally with a sequence cursor."""

from __future__ import annotations

import logging

from juggler.logbook import MAX_LINE_CHARS, ROUTER, LogBook, RingHandler, level_of


def test_each_source_keeps_only_its_newest_lines() -> None:
    book = LogBook(max_lines=3)
    for i in range(5):
        book.append("m", f"line {i}")
    book.append(ROUTER, "router line")
    lines, _ = book.query(source="m")
    assert [line.text for line in lines] == ["line 2", "line 3", "line 4"]
    assert book.query(source=ROUTER)[0][0].text == "router line"


def test_a_poll_from_next_gets_only_the_lines_that_came_after() -> None:
    book = LogBook()
    book.append("a", "one")
    book.append(ROUTER, "two")
    lines, cursor = book.query()
    assert [line.text for line in lines] == ["one", "two"]
    assert book.query(since=cursor) == ([], cursor)
    book.append("a", "three")
    later, cursor2 = book.query(since=cursor)
    assert [line.text for line in later] == ["three"] and cursor2 == cursor + 1


def test_limit_keeps_the_newest_matching_lines_oldest_first() -> None:
    book = LogBook()
    for i in range(10):
        book.append("a", f"n{i}")
    lines, _ = book.query(limit=3)
    assert [line.text for line in lines] == ["n7", "n8", "n9"]


def test_filters_by_source_text_any_case_and_minimum_level() -> None:
    book = LogBook()
    book.append("a", "2026-01-01 10:00:00 INFO juggler.engine: Engine READY")
    book.append("a", "WARNING:  disk is slow")
    book.append("b", "ERROR: backend b failed")
    book.append(ROUTER, "juggler.router: ready", "info")
    assert [line.source for line in book.query(contains="ready")[0]] == ["a", ROUTER]
    assert [line.text for line in book.query(level="warning")[0]] == [
        "WARNING:  disk is slow",
        "ERROR: backend b failed",
    ]
    assert [line.source for line in book.query(source="b")[0]] == ["b"]
    assert book.query(source="nobody")[0] == []


def test_the_least_recently_written_source_goes_first_but_never_the_router() -> None:
    book = LogBook(max_sources=3)
    book.append(ROUTER, "r")
    book.append("old", "x")
    book.append("new", "y")
    book.append("newest", "z")
    assert [s["name"] for s in book.sources()] == [ROUTER, "new", "newest"]


def test_a_line_is_cut_at_the_limit() -> None:
    book = LogBook()
    book.append("a", "x" * (MAX_LINE_CHARS + 50))
    assert len(book.query()[0][0].text) == MAX_LINE_CHARS


def test_level_of_reads_python_and_uvicorn_prefixes() -> None:
    assert level_of("2026-01-01 10:00:00,1 WARNING juggler.engine.x: hm") == "warning"
    assert level_of("ERROR:    Exception in ASGI application") == "error"
    assert level_of("WARN something") == "warning"
    assert level_of("llama_model_loader: loaded meta data") == "info"
    assert level_of("x" * 60 + " ERROR late in the line") == "info"


def test_the_router_handler_writes_records_with_their_level() -> None:
    book = LogBook()
    logger = logging.getLogger("juggler.test_logbook")
    handler = RingHandler(book)
    logger.addHandler(handler)
    try:
        logger.warning("model %s evicted", "m")
    finally:
        logger.removeHandler(handler)
    ((line,), _) = book.query(source=ROUTER)
    assert line.text == "juggler.test_logbook: model m evicted" and line.level == "warning"
