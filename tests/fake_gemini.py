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

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shared.tokens import estimate_tokens
from tests.fake_endpoint import BaseRequest, FakeEndpoint, Reply, error_replies

__all__ = ["FakeGemini", "Reply", "Request"]

_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


@dataclass
class Request(BaseRequest):
    """A request to the fake: `method` is generateContent, embedContent,
    batchEmbedContents, predict or get."""

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

    def messages(self) -> list[tuple[str, str]]:
        """Each content of a generateContent request as (role, text), the model's
        role named "assistant" as in every other API."""
        return [
            (
                "assistant" if content.get("role") == "model" else "user",
                "".join(p.get("text", "") for p in content.get("parts", [])),
            )
            for content in self.body.get("contents", [])
        ]

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


def truncated_reply(text: str) -> Reply:
    """A reply cut at the output token limit: finish reason MAX_TOKENS."""
    reply = text_reply(text)
    reply.body["candidates"][0]["finishReason"] = "MAX_TOKENS"
    return reply


def empty_reply() -> Reply:
    """A candidate with no parts at all (what a blocked or silent model answers)."""
    reply = text_reply("")
    reply.body["candidates"][0]["content"] = {"role": "model", "parts": []}
    return reply


def _error_body(status: int, message: str) -> dict[str, Any]:
    """An error as Gemini answers it."""
    return {
        "error": {
            "code": status,
            "message": message,
            "status": _STATUS_NAMES.get(status, "UNKNOWN"),
        }
    }


error_reply = error_replies(_error_body)


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
class FakeGemini(FakeEndpoint[Request]):
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
    INPUT_TOKENS_AT = ("usageMetadata", "promptTokenCount")
    TOTAL_TOKENS_AT = ("usageMetadata", "totalTokenCount")
    OUTPUT_TOKENS_AT = ("usageMetadata", "candidatesTokenCount")

    def route(self, verb: str, path: str, headers: Any, body: dict[str, Any]) -> Request | Reply:
        key, bearer = headers.get("x-goog-api-key"), headers.get("authorization")
        if verb == "GET":
            return Request("get", path.rsplit("/", 1)[-1], {}, key, bearer)
        model, _, method = path.rsplit("/", 1)[-1].partition(":")
        if method not in self.defaults or method == "get":
            return error_reply(404, f"fake gemini: unknown method {path}")
        return Request(method, model, body, key, bearer)
