"""`openai`: any OpenAI-compatible chat completions endpoint (OpenAI, vLLM, Ollama,
llama.cpp's `llama-server`, LiteLLM, Gemini's OpenAI-compatible endpoint) at
`AM_OPENAI_BASE_URL`, through the `openai` package with its own retries off: every
attempt goes through `shared.llm.asking`, counted and retried as Gemini's are.

The tasks are `shared.llm.tasks`', the same prompts and parsers as `gemini`'s. An
answer is asked for with the task's JSON schema as the endpoint's structured
output (`response_format` `json_schema`; `AM_OPENAI_RESPONSE_FORMAT` picks JSON
mode or the prompt alone for servers without it); its bound is sent as
`max_completion_tokens` (OpenAI refuses `max_tokens` for its reasoning models;
servers that do not know the name ignore it). `finish_reason` `length` is a
truncated answer. The client's errors are read as `Refusal`s: a status answered
(429 a quota, with the wait `Retry-After` or `retry-after-ms` asks for), or no
answer in time or no connection (retried).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import openai

from shared.config import Settings
from shared.llm.asking import Answer, Prompt
from shared.llm.base import Usage
from shared.llm.retrying import Refusal, retry_after, status_refusal
from shared.llm.tasks import ModelTasks

if TYPE_CHECKING:
    from shared.llm.throttle import Throttle

# What the client sends as its key when none is configured: it insists on one, and
# local servers ignore it.
NO_KEY = "none"


def api_key(settings: Settings) -> str:
    """`AM_OPENAI_API_KEY`, else the contents of `AM_OPENAI_API_KEY_FILE`, else none."""
    if settings.openai_api_key is not None:
        return settings.openai_api_key.get_secret_value()
    if settings.openai_api_key_file is not None:
        return settings.openai_api_key_file.read_text(encoding="utf-8").strip() or NO_KEY
    return NO_KEY


def make_client(settings: Settings) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=settings.openai_base_url,
        api_key=api_key(settings),
        timeout=settings.llm_timeout_seconds,
        max_retries=0,  # shared.llm.asking retries, and counts every attempt
    )


class OpenAITransport:
    provider = "openai"

    def __init__(self, client: openai.OpenAI, model: str, response_format: str) -> None:
        self.client = client
        self.model = model
        self.response_format = response_format

    def send(self, prompt: Prompt) -> Answer:
        messages: list[Any] = [{"role": "system", "content": prompt.system}]
        messages += [{"role": m.role, "content": m.text} for m in prompt.messages]
        options: dict[str, Any] = {}
        if self.response_format == "json_schema":
            options["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": prompt.task, "schema": prompt.schema},
            }
        elif self.response_format == "json_object":
            options["response_format"] = {"type": "json_object"}
        response = self.client.chat.completions.create(
            model=self.model,
            messages=messages,
            max_completion_tokens=prompt.max_output_tokens,
            temperature=0.2,
            **options,
        )
        usage = Usage()
        if response.usage is not None:
            usage = Usage(response.usage.prompt_tokens, response.usage.completion_tokens)
        if not response.choices:
            return Answer("", usage)
        choice = response.choices[0]
        return Answer(choice.message.content or "", usage, choice.finish_reason == "length")

    def refusal(self, exc: Exception) -> Refusal | None:
        return openai_refusal(exc)


class OpenAILLM(ModelTasks):
    name = "openai"

    def __init__(
        self,
        settings: Settings,
        client: openai.OpenAI | None = None,
        throttle: Throttle | None = None,
    ) -> None:
        self.client = client or make_client(settings)
        self.model = settings.openai_model
        transport = OpenAITransport(self.client, self.model, settings.openai_response_format)
        super().__init__(settings, transport, throttle)


def openai_refusal(exc: BaseException) -> Refusal | None:
    """An `openai` client error read as a failed request (generation and embeddings)."""
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        code = getattr(exc, "code", None)
        description = f"HTTP {status}" + (f" {code}" if code else "")
        return status_refusal(status, description, retry_after(exc.response.headers))
    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError)):
        return Refusal(f"{type(exc).__name__}: {exc}", retry=True)
    return None


def check_generation(client: openai.OpenAI, model: str) -> None:
    """The workers' probe: does the model answer the smallest request?"""
    client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "ping"}], max_completion_tokens=1
    )
