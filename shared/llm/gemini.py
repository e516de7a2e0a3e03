"""`gemini`: Gemini through google-genai, with an API key or on Vertex AI (ADC).

The tasks are `shared.llm.tasks`' and are asked as `shared.llm.asking` says, the
same as for any model; this module is Gemini's transport: JSON mode with each
task's response schema, the answer's text, usage and finish reason, and its
client's errors read as `Refusal`s (`shared.llm.retrying`): 429 and
RESOURCE_EXHAUSTED are a quota, with the wait that a `Retry-After` header or a
`RetryInfo` detail asks for.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import httpx
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from shared.config import Settings
from shared.llm.asking import Answer, Prompt
from shared.llm.base import Usage
from shared.llm.retrying import Refusal, retry_after, status_refusal
from shared.llm.tasks import ModelTasks

if TYPE_CHECKING:
    from shared.llm.throttle import Throttle

_TRANSIENT: tuple[type[BaseException], ...] = (httpx.TimeoutException, httpx.TransportError)
try:  # google-genai may speak through httpx2 instead
    import httpx2

    _TRANSIENT += (httpx2.TimeoutException, httpx2.TransportError)
except ImportError:  # pragma: no cover - depends on the installed google-genai
    pass

_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_SECONDS = re.compile(r"^(\d+(?:\.\d+)?)s$")


def make_client(settings: Settings) -> genai.Client:
    http_options = types.HttpOptions(
        base_url=settings.gemini_base_url,
        timeout=int(settings.llm_timeout_seconds * 1000),  # milliseconds
    )
    if settings.gemini_api_key is not None:
        return genai.Client(
            api_key=settings.gemini_api_key.get_secret_value(), http_options=http_options
        )
    return genai.Client(
        vertexai=True,
        project=settings.google_cloud_project,
        location=settings.gemini_location,
        http_options=http_options,
    )


class GeminiTransport:
    provider = "gemini"

    def __init__(self, client: genai.Client, model: str) -> None:
        self.client = client
        self.model = model

    def send(self, prompt: Prompt) -> Answer:
        config = types.GenerateContentConfig(
            system_instruction=prompt.system,
            response_mime_type="application/json",
            response_json_schema=prompt.schema,
            max_output_tokens=prompt.max_output_tokens,
            temperature=0.2,
        )
        contents = [
            types.Content(
                role="user" if m.role == "user" else "model", parts=[types.Part(text=m.text)]
            )
            for m in prompt.messages
        ]
        response = self.client.models.generate_content(
            model=self.model, contents=contents, config=config
        )
        candidates = response.candidates or []
        truncated = (
            bool(candidates) and candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
        )
        return Answer(_text(response), _usage(response), truncated)

    def refusal(self, exc: Exception) -> Refusal | None:
        return gemini_refusal(exc)


class GeminiLLM(ModelTasks):
    name = "gemini"

    def __init__(
        self,
        settings: Settings,
        client: genai.Client | None = None,
        throttle: Throttle | None = None,
    ) -> None:
        self.client = client or make_client(settings)
        self.model = settings.llm_model
        super().__init__(settings, GeminiTransport(self.client, self.model), throttle)


def gemini_refusal(exc: BaseException) -> Refusal | None:
    """A google-genai error read as a failed request (generation and embeddings)."""
    if isinstance(exc, _TRANSIENT):
        return Refusal(f"{type(exc).__name__}: {exc}", retry=True)
    if not isinstance(exc, genai_errors.APIError):
        return None
    description = f"HTTP {exc.code} {exc.status or ''}".strip()
    refusal = status_refusal(exc.code, description, _asked_wait(exc))
    if exc.status == "RESOURCE_EXHAUSTED" and not refusal.quota:  # Vertex AI's quota
        return Refusal(description, retry=True, quota=True, retry_after=refusal.retry_after)
    return refusal


def _asked_wait(exc: genai_errors.APIError) -> float | None:
    """The wait the refusal asks for: its `Retry-After` header, else the
    `retryDelay` of a `RetryInfo` detail ("30s")."""
    headers = getattr(exc.response, "headers", None)
    wait = retry_after(headers)
    if wait is not None:
        return wait
    error = exc.details.get("error", exc.details) if isinstance(exc.details, dict) else {}
    for detail in error.get("details", []) if isinstance(error, dict) else []:
        if isinstance(detail, dict) and detail.get("@type") == _RETRY_INFO:
            match = _SECONDS.match(str(detail.get("retryDelay", "")))
            if match:
                return float(match[1])
    return None


def _text(response: types.GenerateContentResponse) -> str:
    """The text parts of the first candidate (never a thought)."""
    candidates = response.candidates or []
    content = candidates[0].content if candidates else None
    parts: list[Any] = (content.parts if content is not None else None) or []
    return "".join(p.text for p in parts if p.text and not p.thought)


def _usage(response: types.GenerateContentResponse) -> Usage:
    meta = response.usage_metadata
    if meta is None:
        return Usage()
    output = (meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0)
    return Usage(meta.prompt_token_count or 0, output)
