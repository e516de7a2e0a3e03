"""What the fake model endpoints (`tests.fake_gemini`, `tests.fake_openai`) share: a
real HTTP server on a free local port that records every request and answers it
with the next scripted `Reply` of its method, or else the method's `default`.

A reply may misbehave as real endpoints do: any status and body, headers
(`Retry-After`), a latency before the first byte (`delay`), or raw bytes.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Generic, TypeVar


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-able
    delay: float = 0.0  # seconds before the first byte
    raw: bytes | None = None  # sent as is instead of `body`
    # The usage reports the request's input tokens (the fake's own field names).
    count_input: bool = False
    headers: dict[str, str] = field(default_factory=dict)


def error_replies(error_body: Callable[[int, str], Any]) -> Callable[..., Reply]:
    """An endpoint's `error_reply(status, message="scripted error", delay=0.0,
    retry_after=None)`: an error whose body is `error_body(status, message)`; with
    `retry_after`, a `Retry-After` header."""

    def error_reply(
        status: int,
        message: str = "scripted error",
        delay: float = 0.0,
        retry_after: float | None = None,
    ) -> Reply:
        headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
        return Reply(status=status, body=error_body(status, message), delay=delay, headers=headers)

    return error_reply


@dataclass
class BaseRequest:
    method: str
    model: str
    body: dict[str, Any]
    api_key: str | None
    authorization: str | None = None
    reply: Reply | None = None  # what the fake answered
    at: float = field(default_factory=time.monotonic)  # when it arrived

    def input_tokens(self) -> int:
        """The request's input tokens as the endpoint would count them."""
        raise NotImplementedError


R = TypeVar("R", bound=BaseRequest)


@dataclass
class FakeEndpoint(Generic[R]):
    """Start with `start()` (or as a context manager); `url` is the base URL."""

    defaults: dict[str, Callable[[R], Reply]] = field(default_factory=dict)
    requests: list[R] = field(default_factory=list)
    _scripts: dict[str, deque[Reply]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    # Where the endpoint's usage counts a request's input tokens (a path of keys).
    INPUT_TOKENS_AT: ClassVar[tuple[str, ...]] = ()
    TOTAL_TOKENS_AT: ClassVar[tuple[str, ...]] = ()
    OUTPUT_TOKENS_AT: ClassVar[tuple[str, ...]] = ()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, method: str, *replies: Reply) -> None:
        """Queue replies for `method`, answered in order before the default."""
        with self._lock:
            self._scripts.setdefault(method, deque()).extend(replies)

    def calls(self, method: str) -> list[R]:
        with self._lock:
            return [r for r in self.requests if r.method == method]

    def route(self, verb: str, path: str, headers: Any, body: dict[str, Any]) -> R | Reply:
        """The request `path` names, or the error reply of a path it does not know."""
        raise NotImplementedError

    def _next(self, request: R) -> Reply:
        with self._lock:
            self.requests.append(request)
            queue = self._scripts.get(request.method)
            scripted = queue.popleft() if queue else None
        reply = self._answered(scripted or self.defaults[request.method](request), request)
        request.reply = reply
        return reply

    def _answered(self, reply: Reply, request: R) -> Reply:
        """`reply` as sent for `request`: its input tokens filled in when it counts them."""
        if not reply.count_input or not isinstance(reply.body, dict):
            return reply
        body = copy.deepcopy(reply.body)
        usage = body
        for key in self.INPUT_TOKENS_AT[:-1]:
            usage = usage.setdefault(key, {})
        usage[self.INPUT_TOKENS_AT[-1]] = request.input_tokens()
        usage[self.TOTAL_TOKENS_AT[-1]] = request.input_tokens() + usage.get(
            self.OUTPUT_TOKENS_AT[-1], 0
        )
        return replace(reply, body=body)

    def start(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                self._serve("GET", {})

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                length = int(self.headers.get("content-length") or 0)
                self._serve("POST", json.loads(self.rfile.read(length) or b"{}"))

            def _serve(self, verb: str, body: dict[str, Any]) -> None:
                found = fake.route(verb, self.path.split("?", 1)[0], self.headers, body)
                self._send(found if isinstance(found, Reply) else fake._next(found))

            def _send(self, reply: Reply) -> None:
                if reply.delay:
                    time.sleep(reply.delay)  # noqa: sleep-ok - a scripted latency
                data = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
