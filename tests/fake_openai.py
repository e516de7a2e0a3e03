"""A fake OpenAI-compatible HTTP endpoint for tests: the real `openai` client talks to
it through `base_url` (or `AM_OPENAI_BASE_URL`), as it would to vLLM, Ollama or
llama.cpp's server.

It speaks the JSON of `POST /v1/chat/completions` (method `chat`), `POST
/v1/embeddings` (`embeddings`) and `GET /v1/models` (`models`). Replies are
scripted per method (`tests.fake_endpoint`); the defaults answer the workers'
probe ("ping"), embed deterministically and list one model. A generated reply
reports the usage an endpoint would: by default the request's own input tokens
(every message, by the project's estimator).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shared.tokens import estimate_tokens
from tests.fake_endpoint import BaseRequest, FakeEndpoint, Reply, error_replies
from tests.fake_gemini import fake_embedding

__all__ = ["FakeOpenAI", "Reply", "Request"]

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error"}


@dataclass
class Request(BaseRequest):
    """A request to the fake: `method` is chat, embeddings or models."""

    def messages(self) -> list[tuple[str, str]]:
        """Each message but the system's as (role, text), in order."""
        return [
            (m["role"], m.get("content") or "")
            for m in self.body.get("messages", [])
            if m["role"] != "system"
        ]

    def system_text(self) -> str:
        return "\n".join(
            m["content"] for m in self.body.get("messages", []) if m["role"] == "system"
        )

    def prompt_text(self) -> str:
        """The first user message: the task's prompt."""
        return next((text for role, text in self.messages() if role == "user"), "")

    def schema(self) -> dict[str, Any]:
        """The JSON schema the request asked its answer to follow ({} for none)."""
        found = self.body.get("response_format") or {}
        return (found.get("json_schema") or {}).get("schema") or {}

    def input_tokens(self) -> int:
        return estimate_tokens(
            "".join(m.get("content") or "" for m in self.body.get("messages", []))
        )

    def embedded_texts(self) -> list[str]:
        found = self.body.get("input", [])
        return [found] if isinstance(found, str) else list(found)


def completion_body(text: str | None, prompt_tokens: int, finish_reason: str = "stop") -> dict:
    output = estimate_tokens(text or "")
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": output,
            "total_tokens": prompt_tokens + output,
        },
    }


def text_reply(text: str | None, prompt_tokens: int | None = None, delay: float = 0.0) -> Reply:
    """A chat completion of `text`; its usage counts the request's own input tokens
    unless `prompt_tokens` says another number."""
    body = completion_body(text, prompt_tokens or 0)
    return Reply(body=body, delay=delay, count_input=prompt_tokens is None)


def json_reply(value: Any, prompt_tokens: int | None = None, delay: float = 0.0) -> Reply:
    return text_reply(json.dumps(value), prompt_tokens, delay)


def truncated_reply(text: str) -> Reply:
    """A completion cut at `max_completion_tokens`: finish_reason length."""
    reply = text_reply(text)
    reply.body["choices"][0]["finish_reason"] = "length"
    return reply


def empty_reply() -> Reply:
    """A completion whose message has no content."""
    return text_reply(None)


def _error_body(status: int, message: str) -> dict[str, Any]:
    """An error as OpenAI answers it."""
    return {
        "error": {
            "message": message,
            "type": _ERROR_TYPES.get(status, "server_error"),
            "code": None,
        }
    }


error_reply = error_replies(_error_body)


def _default_chat(request: Request) -> Reply:
    if request.prompt_text() == "ping":  # the workers' probe
        return text_reply("pong")
    return error_reply(500, "fake openai: no scripted reply for chat")


def _default_embeddings(request: Request) -> Reply:
    dimension = request.body.get("dimensions") or 768
    texts = request.embedded_texts()
    data = [
        {"object": "embedding", "index": i, "embedding": fake_embedding(text, dimension)}
        for i, text in enumerate(texts)
    ]
    tokens = sum(estimate_tokens(t) for t in texts)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return Reply(body={"object": "list", "data": data, "model": request.model, "usage": usage})


def _default_models(request: Request) -> Reply:
    return Reply(body={"object": "list", "data": [{"id": "fake-model", "object": "model"}]})


@dataclass
class FakeOpenAI(FakeEndpoint[Request]):
    """Start with `start()` (or as a context manager); `url` is the base URL (with
    its `/v1`, as OpenAI-compatible servers give theirs)."""

    defaults: dict[str, Callable[[Request], Reply]] = field(
        default_factory=lambda: {
            "chat": _default_chat,
            "embeddings": _default_embeddings,
            "models": _default_models,
        }
    )
    INPUT_TOKENS_AT = ("usage", "prompt_tokens")
    TOTAL_TOKENS_AT = ("usage", "total_tokens")
    OUTPUT_TOKENS_AT = ("usage", "completion_tokens")

    @property
    def url(self) -> str:
        return super().url + "/v1"

    def route(self, verb: str, path: str, headers: Any, body: dict[str, Any]) -> Request | Reply:
        method = {
            ("POST", "/v1/chat/completions"): "chat",
            ("POST", "/v1/embeddings"): "embeddings",
            ("GET", "/v1/models"): "models",
        }.get((verb, path))
        if method is None:
            return error_reply(404, f"fake openai: unknown path {verb} {path}")
        authorization = headers.get("authorization") or ""
        key = authorization.removeprefix("Bearer ") or None
        return Request(method, str(body.get("model", "")), body, key, authorization)
