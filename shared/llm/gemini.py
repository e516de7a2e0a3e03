"""`gemini`: Gemini through google-genai, with an API key or on Vertex AI (ADC).

Structured tasks use JSON mode with a response schema. One task may take several
HTTP calls: 429, 408, 5xx, timeouts, connection errors and unusable replies
(empty, not JSON, not the schema) are retried with jittered exponential backoff;
no attempt starts after `AM_LLM_RETRY_SECONDS` from the first, so a task takes
at most that plus one call's timeout (`AM_LLM_TIMEOUT_SECONDS`). Other 4xx are
not retried. Every call's tokens go into the metrics and into the task's usage.

Tasks (the metric's `task` label): "summarize", and the memory tasks "compact",
"extract", "consolidate" and "decompose", whose instructions, schemas and strict
parsers are in `shared.llm.extraction_prompts` (extract, consolidate) and
`shared.llm.gemini_prompts` (the others).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import structlog
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from shared.config import Settings
from shared.llm import extraction_prompts as write_prompts
from shared.llm import gemini_prompts as prompts
from shared.llm.base import (
    Completion,
    Decision,
    DialogueTurn,
    ExtractionInput,
    Found,
    LLMError,
    LLMUnavailable,
    MalformedReply,
    Usage,
    Weighing,
)
from shared.metrics import LLM_CALLS, count_llm_tokens
from shared.tokens import clip_to_tokens

log = structlog.get_logger("agent_memory.llm")

T = TypeVar("T")

_TRANSIENT: tuple[type[BaseException], ...] = (httpx.TimeoutException, httpx.TransportError)
try:  # google-genai may speak through httpx2 instead
    import httpx2

    _TRANSIENT += (httpx2.TimeoutException, httpx2.TransportError)
except ImportError:  # pragma: no cover - depends on the installed google-genai
    pass

_RETRIED_STATUS = {408, 429}
_CREDENTIALS_REFUSED = {401, 403}
_BACKOFF_CAP_SECONDS = 8.0

_SUMMARY_SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
}

# Output bounds of the memory tasks (a thinking model's thoughts count too).
_EXTRACT_MAX_OUTPUT_TOKENS = 4096
_CONSOLIDATE_MAX_OUTPUT_TOKENS = 1024
_DECOMPOSE_MAX_OUTPUT_TOKENS = 512


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


class GeminiLLM:
    name = "gemini"

    def __init__(self, settings: Settings, client: genai.Client | None = None) -> None:
        self.settings = settings
        self.model = settings.llm_model
        self.client = client or make_client(settings)

    def summarize(
        self, previous: str, turns: list[DialogueTurn], max_tokens: int
    ) -> Completion[str]:
        prompt = prompts.summary_prompt(previous, turns)

        def parse(value: Any) -> str:
            summary = value.get("summary") if isinstance(value, dict) else None
            if not isinstance(summary, str) or not summary.strip():
                raise MalformedReply("no non-empty 'summary' string")
            # The bound holds whatever the model wrote.
            return clip_to_tokens(summary.strip(), max_tokens)

        return self.generate_json(
            task="summarize",
            system=prompts.summary_instruction(max_tokens),
            prompt=prompt,
            schema=_SUMMARY_SCHEMA,
            parse=parse,
            max_output_tokens=max_tokens * 2,
        )

    def compact(
        self, previous: str, episodes: list[DialogueTurn], max_tokens: int
    ) -> Completion[str]:
        return self.generate_json(
            task="compact",
            system=prompts.compaction_instruction(previous, max_tokens),
            prompt=prompts.compaction_prompt(previous, episodes),
            schema=prompts.COMPACTION_SCHEMA,
            parse=lambda value: prompts.parse_compaction(value, previous, max_tokens),
            max_output_tokens=prompts.additions_bound(previous, max_tokens) * 2,
        )

    def extract(self, inp: ExtractionInput) -> Completion[list[Found]]:
        return self.generate_json(
            task="extract",
            system=write_prompts.extraction_instruction(inp),
            prompt=write_prompts.extraction_prompt(inp),
            schema=write_prompts.extraction_schema(inp),
            parse=lambda value: write_prompts.parse_found(value, inp),
            max_output_tokens=_EXTRACT_MAX_OUTPUT_TOKENS,
        )

    def consolidate(self, weighings: list[Weighing]) -> Completion[list[Decision]]:
        return self.generate_json(
            task="consolidate",
            system=write_prompts.CONSOLIDATION_INSTRUCTION,
            prompt=write_prompts.consolidation_prompt(weighings),
            schema=write_prompts.consolidation_schema(weighings),
            parse=lambda value: write_prompts.parse_decisions(value, weighings),
            max_output_tokens=_CONSOLIDATE_MAX_OUTPUT_TOKENS * max(1, len(weighings)),
        )

    def decompose(self, query: str, session_id: str, prev_session_id: str) -> Completion[list[str]]:
        return self.generate_json(
            task="decompose",
            system=prompts.decomposition_instruction(session_id, prev_session_id),
            prompt=prompts.decomposition_prompt(query),
            schema=prompts.DECOMPOSITION_SCHEMA,
            parse=prompts.parse_queries,
            max_output_tokens=_DECOMPOSE_MAX_OUTPUT_TOKENS,
        )

    def generate_json(
        self,
        *,
        task: str,
        system: str,
        prompt: str,
        schema: dict[str, Any],
        parse: Callable[[Any], T],
        max_output_tokens: int,
    ) -> Completion[T]:
        """One structured task, retried as the module says."""
        config = types.GenerateContentConfig(
            system_instruction=system,
            response_mime_type="application/json",
            response_json_schema=schema,
            max_output_tokens=max_output_tokens,
            temperature=0.2,
        )
        started = time.monotonic()
        usage = Usage()
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self.client.models.generate_content(
                    model=self.model, contents=prompt, config=config
                )
                call_usage = _usage(response)
                usage += call_usage
                count_llm_tokens(self.name, task, call_usage.input_tokens, call_usage.output_tokens)
                text = response.text
                if not text:
                    raise MalformedReply("empty reply")
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise MalformedReply(f"not JSON ({exc.msg})") from None
                result = parse(value)
            except Exception as exc:
                time.sleep(
                    retry_delay(
                        exc,
                        Attempt(self.name, task, attempt, started),
                        self.settings,
                        LLMError,
                        LLMUnavailable,
                        "no usable reply",
                    )
                )
                continue
            LLM_CALLS.labels(self.name, task, "ok").inc()
            return Completion(result, usage, attempts=attempt)


@dataclass(frozen=True)
class Attempt:
    provider: str
    task: str  # the metrics' task label
    number: int  # 1 for the first
    started: float  # time.monotonic() of the first


def retry_delay(
    exc: BaseException,
    attempt: Attempt,
    settings: Settings,
    error: type[Exception],
    unavailable: type[Exception],
    gave_up: str,
) -> float:
    """The backoff before the next attempt after `exc`, or an exception when there
    is none: `error` when the event may be the cause (a refused request, replies
    that stayed unusable), `unavailable` when the endpoint is (it stayed down,
    timing out or rate-limiting until the next attempt would start after
    AM_LLM_RETRY_SECONDS, or it refused our credentials). Counts the attempt in
    the metrics. Shared by every Gemini call (generation and embeddings)."""
    task = attempt.task
    if not _retryable(exc):
        LLM_CALLS.labels(attempt.provider, task, "failed").inc()
        refused = isinstance(exc, genai_errors.APIError) and exc.code in _CREDENTIALS_REFUSED
        raise (unavailable if refused else error)(f"{task}: {_describe(exc)}") from exc
    delay = _backoff(settings.llm_retry_initial_seconds, attempt.number)
    elapsed = time.monotonic() - attempt.started
    if elapsed + delay > settings.llm_retry_seconds:
        LLM_CALLS.labels(attempt.provider, task, "failed").inc()
        cls = error if isinstance(exc, MalformedReply) else unavailable
        raise cls(
            f"{task}: {gave_up} after {attempt.number} attempts in {elapsed:.1f} s; "
            f"last: {_describe(exc)}"
        ) from exc
    LLM_CALLS.labels(attempt.provider, task, "retried").inc()
    log.info("gemini retry", task=task, attempt=attempt.number, error=_describe(exc))
    return delay


def _usage(response: types.GenerateContentResponse) -> Usage:
    meta = response.usage_metadata
    if meta is None:
        return Usage()
    output = (meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0)
    return Usage(meta.prompt_token_count or 0, output)


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, (MalformedReply, *_TRANSIENT)):
        return True
    if isinstance(exc, genai_errors.APIError):
        return exc.code in _RETRIED_STATUS or exc.code >= 500
    return False


def _describe(exc: BaseException) -> str:
    if isinstance(exc, genai_errors.APIError):
        return f"HTTP {exc.code} {exc.status or ''}".strip()
    return f"{type(exc).__name__}: {exc}"


def _backoff(initial: float, attempt: int) -> float:
    """Full jitter: uniform in [0, min(cap, initial * 2^(attempt-1))], at least 10 ms."""
    ceiling = min(_BACKOFF_CAP_SECONDS, initial * 2 ** (attempt - 1))
    return max(0.01, random.uniform(0, ceiling))  # noqa: S311 - jitter, not security
