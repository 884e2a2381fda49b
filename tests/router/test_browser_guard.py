"""The browser door's pure checks (issue 22): Host, Origin and content type."""

from __future__ import annotations

import pytest

from juggler.router.core.browser_guard import (
    BrowserGuard,
    body_refusal,
    host_allowed,
    origin_allowed,
    split_host,
)


def test_split_host() -> None:
    assert split_host("127.0.0.1:13305") == ("127.0.0.1", 13305)
    assert split_host("[::1]:80") == ("::1", 80)
    assert split_host("[::1]") == ("::1", None)
    assert split_host("LocalHost") == ("localhost", None)
    assert split_host("::1") == ("::1", None)


@pytest.mark.parametrize(
    "host", ["localhost", "localhost:13305", "127.0.0.1", "127.0.0.1:1", "[::1]:13305", "127.9.9.9"]
)
def test_a_loopback_server_answers_its_own_names(host: str) -> None:
    """Issue 22: "when bound to a loopback address, accept only Host values that name the
    server itself (localhost, 127.0.0.1, [::1], with or without the port)"."""
    assert host_allowed(host, "127.0.0.1", ())


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:13305", "10.0.0.5", "", "localhost.evil"]
)
def test_a_loopback_server_refuses_other_hosts(host: str) -> None:
    assert not host_allowed(host, "127.0.0.1", ())


def test_allowed_hosts_add_names_and_domains() -> None:
    assert host_allowed("box.lan:13305", "127.0.0.1", ("box.lan",))
    assert host_allowed("a.b.corp.example", "127.0.0.1", ("*.corp.example",))
    assert host_allowed("corp.example", "127.0.0.1", ("*.corp.example",))
    assert not host_allowed("evilcorp.example", "127.0.0.1", ("*.corp.example",))
    assert host_allowed("anything", "127.0.0.1", ("*",))


def test_a_server_bound_elsewhere_answers_its_address_and_addresses_on_every_interface() -> None:
    """Issue 22: "When bound to another address, the bind address and allowed_hosts
    count." Bound to every interface, any IP address names it (a rebinding page always
    sends its own hostname)."""
    assert host_allowed("192.168.1.5:13305", "192.168.1.5", ())
    assert not host_allowed("192.168.1.6", "192.168.1.5", ())
    assert host_allowed("10.1.2.3:13305", "0.0.0.0", ())
    assert host_allowed("[fe80::1]:13305", "::", ())
    assert not host_allowed("juggler.svc", "0.0.0.0", ())
    assert host_allowed("juggler.svc", "0.0.0.0", ("juggler.svc",))
    assert host_allowed(None, "127.0.0.1", ())  # no Host at all: not a browser


def test_origin_must_be_the_servers_own_or_listed() -> None:
    """Issue 22: "a request that carries an Origin header is refused unless the origin is
    the server's own (the dashboard) or listed in cors_origins"."""
    assert origin_allowed("http://127.0.0.1:13305", "127.0.0.1:13305", ())
    assert origin_allowed("http://localhost", "localhost:80", ())
    assert not origin_allowed("http://127.0.0.1:8000", "127.0.0.1:13305", ())
    assert not origin_allowed("http://evil.example", "127.0.0.1:13305", ())
    assert not origin_allowed("null", "127.0.0.1:13305", ())
    assert origin_allowed("https://127.0.0.1:13305", "127.0.0.1:13305", ())  # behind TLS
    assert origin_allowed("http://app.example/", "127.0.0.1:13305", ("http://app.example",))
    assert origin_allowed("http://any.example", "127.0.0.1:13305", ("*",))


def test_bodies_must_be_json_and_curl_defaults_pass_only_outside_browsers() -> None:
    """Issue 22: "request bodies are parsed as JSON only when the content type says JSON
    (multipart only where uploads are meant); anything else gets 415"."""
    assert body_refusal("/v1/chat/completions", "application/json", is_browser=True) is None
    assert body_refusal("/v1/x", "application/json; charset=utf-8", is_browser=True) is None
    assert body_refusal("/v1/x", "application/merge-patch+json", is_browser=True) is None
    refused = body_refusal("/internal/set", "text/plain", is_browser=False)
    assert refused is not None and refused.status == 415
    assert body_refusal("/internal/set", "multipart/form-data; boundary=x", is_browser=False)
    assert (
        body_refusal("/api/generate", "application/x-www-form-urlencoded", is_browser=False) is None
    )
    assert body_refusal("/api/generate", None, is_browser=False) is None
    assert body_refusal("/api/generate", "application/x-www-form-urlencoded", is_browser=True)
    assert body_refusal("/api/generate", None, is_browser=True)
    assert body_refusal("/api/blobs/sha256:ab", "application/octet-stream", is_browser=True) is None


def test_the_guard_checks_in_order() -> None:
    guard = BrowserGuard("127.0.0.1", (), ())
    ok = {
        b"host": b"127.0.0.1:13305",
        b"content-type": b"application/json",
        b"content-length": b"2",
    }
    assert guard.refusal("POST", "/internal/set", ok) is None
    bad_host = guard.refusal("GET", "/api/v1/logs", {**ok, b"host": b"evil.example"})
    assert bad_host is not None and bad_host.status == 403 and "allowed_hosts" in bad_host.message
    bad_origin = guard.refusal("GET", "/v1/models", {**ok, b"origin": b"http://evil.example"})
    assert bad_origin is not None and "cors_origins" in bad_origin.message
    plain = guard.refusal("POST", "/internal/set", {**ok, b"content-type": b"text/plain"})
    assert plain is not None and plain.status == 415
    empty = {b"host": b"127.0.0.1", b"content-length": b"0"}
    assert guard.refusal("POST", "/api/v1/unload", empty) is None


def test_non_finite_numbers_are_refused_when_a_body_is_read() -> None:
    """Issue 27: "non-finite floats are 400 in every dialect" (`Infinity`, `NaN`, `1e309`):
    every router route reads its body through `read_json`."""
    import asyncio

    from juggler.errors import BadRequest
    from juggler.router.core.bodies import read_json

    class Body:
        def __init__(self, raw: bytes) -> None:
            self.raw = raw

        async def body(self) -> bytes:
            return self.raw

    for raw in (
        b'{"repeat_penalty": Infinity}',
        b'{"x": NaN}',
        b'{"options": {"temperature": 1e309}}',
        b'{"x": -Infinity}',
    ):
        with pytest.raises(BadRequest):
            asyncio.run(read_json(Body(raw)))  # type: ignore[arg-type]
    assert asyncio.run(read_json(Body(b'{"x": 1e308}'))) == {"x": 1e308}  # type: ignore[arg-type]
