"""What every request gets whatever its route does, over real HTTP (uvicorn): a
request id, a body size limit checked before the body is read, and an unexpected
error answered in the API's error shape on a connection that stays usable."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from services.api.app import create_app
from tests.support import serve_api

LIMIT = 4096


@pytest.fixture
def api(app_settings, topology):
    settings = app_settings.model_copy(update={"max_request_bytes": LIMIT})
    app = create_app(settings)

    # A route that fails as no route should: what an unforeseen bug would do.
    @app.get("/v1/test-failure")
    async def failure() -> None:
        raise RuntimeError("an unforeseen bug")

    with serve_api(settings, app) as url:
        yield url


def test_an_unexpected_error_is_a_500_in_the_error_shape_and_the_connection_stays(api):
    with _Connection(api) as conn:
        status, headers, body = conn.request(
            b"GET /v1/test-failure HTTP/1.1\r\nHost: api\r\nX-Request-ID: req-42\r\n\r\n"
        )
        assert status == 500
        assert json.loads(body) == {
            "error": {
                "code": "internal",
                "message": "internal error; see the server log",
                "request_id": "req-42",
            }
        }
        assert headers["x-request-id"] == "req-42"
        assert "connection" not in headers
        # The client's next request goes over the same connection and is answered.
        status, _headers, body = conn.request(b"GET /healthz HTTP/1.1\r\nHost: api\r\n\r\n")
        assert (status, json.loads(body)) == (200, {"status": "ok"})


def test_every_response_carries_a_request_id_and_errors_name_it(api):
    with httpx.Client(base_url=api, timeout=10) as client:
        ok = client.get("/healthz")
        generated = ok.headers["x-request-id"]
        assert len(generated) == 32 and generated != client.get("/healthz").headers["x-request-id"]
        # A client id that is not a short printable token is replaced, not echoed.
        bad = client.get("/v1/sessions/s", params={"user_id": ""}, headers={"X-Request-ID": "a b"})
        assert bad.status_code == 422
        assert bad.json()["error"]["request_id"] == bad.headers["x-request-id"] != "a b"
        # A 405 says which methods the route takes.
        wrong = client.request("PATCH", "/v1/sessions/s")
        assert (wrong.status_code, wrong.headers["allow"]) == (405, "DELETE, GET")


class _Connection:
    """One keep-alive HTTP/1.1 connection, requests written by hand: what the server
    does with the connection, and with a body it is never sent, is seen as is."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
        self.buffered = b""

    def __enter__(self) -> _Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def request(self, raw: bytes) -> tuple[int, dict[str, str], bytes]:
        """Send `raw`; the status, headers (names lower-cased) and body of the answer."""
        self.sock.sendall(raw)
        while b"\r\n\r\n" not in self.buffered:
            self.buffered += self._recv()
        head, self.buffered = self.buffered.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines[1:])
        headers = {name.lower(): value for name, value in headers.items()}
        length = int(headers["content-length"])
        while len(self.buffered) < length:
            self.buffered += self._recv()
        body, self.buffered = self.buffered[:length], self.buffered[length:]
        return int(lines[0].split()[1]), headers, body

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        assert chunk, "the server closed the connection"
        return chunk


def test_a_body_declared_over_the_limit_is_refused_before_it_is_read(api):
    with _Connection(api) as conn:
        started = time.monotonic()
        # 200 MB declared and none of it sent: the answer cannot have waited for it.
        status, headers, body = conn.request(
            b"POST /v1/memories HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\n"
            b"Content-Length: 200000000\r\n\r\n"
        )
        took = time.monotonic() - started
    assert (status, headers["connection"]) == (413, "close")
    assert json.loads(body) == {
        "error": {
            "code": "too_large",
            "message": "body: the request body (200000000 bytes) is over the limit of 4096 bytes",
            "request_id": headers["x-request-id"],
        }
    }
    assert took < 5


def test_a_chunked_body_over_the_limit_is_cut_off_with_413(api):
    chunk = b"x" * 3000
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(3)) + b"0\r\n\r\n"
    with _Connection(api) as conn:
        status, headers, answer = conn.request(
            b"POST /v1/memories HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + body
        )
    assert (status, headers["connection"]) == (413, "close")
    assert json.loads(answer)["error"]["message"] == (
        "body: the request body is over the limit of 4096 bytes"
    )


def test_a_body_within_the_limit_is_read_as_before(api, ids):
    with httpx.Client(base_url=api, timeout=10) as client:
        written = client.post(
            "/v1/memories",
            json={
                "user_id": ids["user_id"],
                "text": "User prefers tea.",
                "kind": "preference",
                "scope": "global",
            },
        )
        assert written.status_code == 201, written.text
