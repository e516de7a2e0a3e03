"""The API's `app;dur` entry joins the route's Server-Timing header."""

from services.api.app import _with_timing


def test_the_entry_joins_the_routes_header_or_becomes_one():
    headers = iter([(b"content-type", b"application/json"), (b"server-timing", b"publish;dur=2")])
    assert _with_timing(headers, b"app;dur=3") == [
        (b"content-type", b"application/json"),
        (b"server-timing", b"publish;dur=2, app;dur=3"),
    ]
    assert _with_timing([], b"app;dur=3") == [(b"server-timing", b"app;dur=3")]
