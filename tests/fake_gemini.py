"""A fake Gemini HTTP endpoint for tests: the real google-genai client talks to it
through `HttpOptions(base_url=...)` (or `AM_GEMINI_BASE_URL`).

It speaks the JSON of `models/{model}:generateContent`, `:embedContent` and
`:batchEmbedContents`, Vertex AI's `:predict` (what google-genai sends for
text-embedding models on Vertex AI), and `GET models/{model}` (method `get`: the
workers' probe of the endpoint). Replies are scripted per method (a queue of `Reply`s,
each with a status, a body and a latency); when a method's queue is empty its
`default` function answers. Every request is recorded, with the reply it got.
A generated reply reports the usage Gemini would: by default the request's own
input tokens (its system instruction and contents, by the project's estimator).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from shared.tokens import estimate_tokens

_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-able; for 200 on generateContent see `text_reply`
    delay: float = 0.0  # seconds before answering
    raw: bytes | None = None  # sent as is instead of `body`
    # The usage reports the request's input tokens as its promptTokenCount.
    count_input: bool = False


@dataclass
class Request:
    method: str  # generateContent, embedContent, batchEmbedContents, predict, get
    model: str
    body: dict[str, Any]
    api_key: str | None
    authorization: str | None = None  # Vertex AI's bearer token
    reply: Reply | None = None  # what the fake answered

    def system_text(self) -> str:
        """The system instruction of a generateContent request."""
        instruction = self.body.get("systemInstruction") or {}
        return "\n".join(p.get("text", "") for p in instruction.get("parts", []) or [])

    def input_tokens(self) -> int:
        """The request's input as Gemini counts it: the system instruction and the
        contents (the project's estimator)."""
        return estimate_tokens(self.system_text() + self.prompt_text())

    def prompt_text(self) -> str:
        """Every text part of the request's contents, joined."""
        texts = []
        for content in self.body.get("contents", []):
            for part in content.get("parts", []):
                if "text" in part:
                    texts.append(part["text"])
        return "\n".join(texts)

    def embedded_texts(self) -> list[str]:
        """The texts of an embedding request (any of the three methods), in order."""
        if self.method == "predict":
            return [instance.get("content", "") for instance in self._instances()]
        return [_item_text(item) for item in self._items()]

    def task_types(self) -> list[str | None]:
        """The task type of each text of an embedding request, in order."""
        if self.method == "predict":
            return [instance.get("task_type") for instance in self._instances()]
        return [_item_option(item, "taskType") for item in self._items()]

    def _instances(self) -> list[dict[str, Any]]:
        return self.body.get("instances", [])

    def _items(self) -> list[dict[str, Any]]:
        """The single requests of an `embedContent` or `batchEmbedContents` body."""
        if self.method == "batchEmbedContents":
            return self.body.get("requests", [])
        return [self.body]


def text_reply(text: str, prompt_tokens: int | None = None) -> Reply:
    """A generateContent reply of `text`. Its usage reports `prompt_tokens` input
    tokens; by default the request's own (`Request.input_tokens`), as Gemini does."""
    body = generate_body([{"text": text}], prompt_tokens or 0, estimate_tokens(text))
    return Reply(body=body, count_input=prompt_tokens is None)


def json_reply(value: Any, prompt_tokens: int | None = None) -> Reply:
    return text_reply(json.dumps(value), prompt_tokens)


def error_reply(status: int, message: str = "scripted error", delay: float = 0.0) -> Reply:
    return Reply(
        status=status,
        body={
            "error": {
                "code": status,
                "message": message,
                "status": _STATUS_NAMES.get(status, "UNKNOWN"),
            }
        },
        delay=delay,
    )


def embeddings_reply(*vectors: list[float]) -> Reply:
    """A `batchEmbedContents` reply (the Gemini API's) carrying `vectors` as they are."""
    return Reply(body={"embeddings": [{"values": list(v)} for v in vectors]})


def generate_body(parts: list[dict[str, Any]], prompt_tokens: int, output_tokens: int) -> dict:
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": output_tokens,
            "totalTokenCount": prompt_tokens + output_tokens,
        },
        "modelVersion": "fake-gemini",
    }


def _answered(reply: Reply, request: Request) -> Reply:
    """`reply` as sent for `request`: its input tokens filled in when it counts them."""
    if not reply.count_input or not isinstance(reply.body, dict):
        return reply
    body = copy.deepcopy(reply.body)
    usage = body.setdefault("usageMetadata", {})
    usage["promptTokenCount"] = request.input_tokens()
    usage["totalTokenCount"] = usage["promptTokenCount"] + usage.get("candidatesTokenCount", 0)
    return replace(reply, body=body)


def fake_embedding(text: str, dimension: int) -> list[float]:
    """A deterministic unit vector for `text` (tests compare them, nothing more)."""
    values = []
    counter = 0
    while len(values) < dimension:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        values.extend((b - 127.5) / 127.5 for b in digest)
        counter += 1
    values = values[:dimension]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def _default_get(request: Request) -> Reply:
    return Reply(body={"name": f"models/{request.model}", "displayName": request.model})


def _default_generate(request: Request) -> Reply:
    return error_reply(500, "fake gemini: no scripted reply for generateContent")


def _item_text(item: dict[str, Any]) -> str:
    return " ".join(p.get("text", "") for p in item.get("content", {}).get("parts", []))


def _item_option(item: dict[str, Any], name: str) -> Any:
    """An option of one embedding request: the Gemini API's at the top, Vertex AI's
    in `embedContentConfig`."""
    if name in item:
        return item[name]
    return item.get("embedContentConfig", {}).get(name)


def _embedding(item: dict[str, Any]) -> dict[str, list[float]]:
    """One `embedContent` request body's embedding."""
    dimension = _item_option(item, "outputDimensionality") or 768
    return {"values": fake_embedding(_item_text(item), dimension)}


def _default_embed(request: Request) -> Reply:
    return Reply(body={"embedding": _embedding(request.body)})


def _default_batch_embed(request: Request) -> Reply:
    return Reply(
        body={"embeddings": [_embedding(item) for item in request.body.get("requests", [])]}
    )


def _default_predict(request: Request) -> Reply:
    """Vertex AI's text-embedding `predict`: one prediction per instance, each with
    its token count (the project's estimate)."""
    dimension = request.body.get("parameters", {}).get("outputDimensionality") or 768
    predictions = []
    for instance in request.body.get("instances", []):
        text = instance.get("content", "")
        statistics = {"token_count": estimate_tokens(text), "truncated": False}
        values = fake_embedding(text, dimension)
        predictions.append({"embeddings": {"values": values, "statistics": statistics}})
    return Reply(body={"predictions": predictions})


@dataclass
class FakeGemini:
    """Start with `start()` (or as a context manager); `url` is the base URL."""

    defaults: dict[str, Callable[[Request], Reply]] = field(
        default_factory=lambda: {
            "generateContent": _default_generate,
            "embedContent": _default_embed,
            "batchEmbedContents": _default_batch_embed,
            "predict": _default_predict,
            "get": _default_get,
        }
    )
    requests: list[Request] = field(default_factory=list)
    _scripts: dict[str, deque[Reply]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, method: str, *replies: Reply) -> None:
        """Queue replies for `method`, answered in order before the default."""
        with self._lock:
            self._scripts.setdefault(method, deque()).extend(replies)

    def calls(self, method: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.method == method]

    def _next(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            queue = self._scripts.get(request.method)
            scripted = queue.popleft() if queue else None
        reply = _answered(scripted or self.defaults[request.method](request), request)
        request.reply = reply
        return reply

    def start(self) -> FakeGemini:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                model = self.path.split("?", 1)[0].rsplit("/", 1)[-1]
                request = Request(
                    "get",
                    model,
                    {},
                    self.headers.get("x-goog-api-key"),
                    self.headers.get("authorization"),
                )
                self._send(fake._next(request))

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?", 1)[0]
                model, _, method = path.rsplit("/", 1)[-1].partition(":")
                if method not in fake.defaults or method == "get":
                    self._send(error_reply(404, f"fake gemini: unknown method {path}"))
                    return
                request = Request(
                    method,
                    model,
                    body,
                    self.headers.get("x-goog-api-key"),
                    self.headers.get("authorization"),
                )
                self._send(fake._next(request))

            def _send(self, reply: Reply) -> None:
                if reply.delay:
                    time.sleep(reply.delay)  # noqa: sleep-ok - a scripted latency
                data = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
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

    def __enter__(self) -> FakeGemini:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
