"""`gemini`: Gemini through google-genai, with an API key or on Vertex AI (ADC).

Structured tasks use JSON mode with a response schema. One task may take several
HTTP calls: 429, 408, 5xx, timeouts, connection errors and unusable replies
(empty, not JSON, not the schema) are retried with jittered exponential backoff;
no attempt starts after `AM_LLM_RETRY_SECONDS` from the first, so a task takes
at most that plus one call's timeout (`AM_LLM_TIMEOUT_SECONDS`). Other 4xx are
not retried; a task whose retries end on 429 raises `LLMRateLimited`. Every HTTP
attempt is counted with its result, and its tokens go into the metrics and into
the task's usage (`shared.llm.accounting`). Given a `Throttle` (the workers', with
`AM_LLM_MAX_CALLS_PER_MINUTE`), each attempt first waits for the app's limit.

Tasks (the metrics' `purpose` label): "summarize", and the memory tasks "compact",
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
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import structlog
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from shared.config import Settings
from shared.llm import accounting
from shared.llm import extraction_prompts as write_prompts
from shared.llm import gemini_prompts as prompts
from shared.llm.base import (
    Completion,
    Decision,
    DialogueTurn,
    ExtractionInput,
    Found,
    LLMError,
    LLMRateLimited,
    LLMUnavailable,
    MalformedReply,
    Usage,
    Weighing,
)
from shared.tokens import clip_to_tokens

if TYPE_CHECKING:
    from shared.llm.throttle import Throttle

log = structlog.get_logger("agent_memory.llm")

T = TypeVar("T")

_TRANSIENT: tuple[type[BaseException], ...] = (httpx.TimeoutException, httpx.TransportError)
try:  # google-genai may speak through httpx2 instead
    import httpx2

    _TRANSIENT += (httpx2.TimeoutException, httpx2.TransportError)
except ImportError:  # pragma: no cover - depends on the installed google-genai
    pass

_RATE_LIMITED_STATUS = 429
_RETRIED_STATUS = {408, _RATE_LIMITED_STATUS}
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

    def __init__(
        self,
        settings: Settings,
        client: genai.Client | None = None,
        throttle: Throttle | None = None,
    ) -> None:
        self.settings = settings
        self.model = settings.llm_model
        self.client = client or make_client(settings)
        self.throttle = throttle  # the app's limit of calls; None: no limit

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
            # A memory or two a turn, each a few dozen tokens of JSON: room grows with
            # the window, so a dense one is never cut off (and retried as malformed).
            max_output_tokens=_EXTRACT_MAX_OUTPUT_TOKENS * max(1, -(-len(inp.turns) // 5)),
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
            if self.throttle is not None:
                # Outside the retries: a Valkey error is Valkey's outage. The wait is
                # the limit's, not the endpoint's: the retry window starts later.
                started += self.throttle.admit(accounting.current_app(), task)
            try:
                response = self.client.models.generate_content(
                    model=self.model, contents=prompt, config=config
                )
                call_usage = _usage(response)
                usage += call_usage
                accounting.count_tokens(task, call_usage.input_tokens, call_usage.output_tokens)
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
                        Attempt(task, attempt, started),
                        self.settings,
                        LLMError,
                        LLMUnavailable,
                        LLMRateLimited,
                        "no usable reply",
                    )
                )
                continue
            accounting.count_call(task, accounting.OK)
            return Completion(result, usage, attempts=attempt)


@dataclass(frozen=True)
class Attempt:
    task: str  # the metrics' purpose label
    number: int  # 1 for the first
    started: float  # time.monotonic() of the first


def retry_delay(
    exc: BaseException,
    attempt: Attempt,
    settings: Settings,
    error: type[Exception],
    unavailable: type[Exception],
    rate_limited: type[Exception],
    gave_up: str,
) -> float:
    """The backoff before the next attempt after `exc`, or an exception when there
    is none: `error` when the event may be the cause (a refused request, replies
    that stayed unusable), `unavailable` when the endpoint is (it stayed down or
    timing out until the next attempt would start after AM_LLM_RETRY_SECONDS, or
    it refused our credentials), `rate_limited` when the last refusal was for
    quota (429). Counts the attempt in the metrics, `retried` or `failed`, and a
    429 as `rate_limited` besides. Shared by every Gemini call (generation and
    embeddings)."""
    task = attempt.task
    quota = _rate_limited(exc)
    if quota:
        accounting.count_call(task, accounting.RATE_LIMITED)
    if not _retryable(exc):
        accounting.count_call(task, accounting.FAILED)
        refused = isinstance(exc, genai_errors.APIError) and exc.code in _CREDENTIALS_REFUSED
        raise (unavailable if refused else error)(f"{task}: {_describe(exc)}") from exc
    delay = _backoff(settings.llm_retry_initial_seconds, attempt.number)
    elapsed = time.monotonic() - attempt.started
    if elapsed + delay > settings.llm_retry_seconds:
        accounting.count_call(task, accounting.FAILED)
        cls = unavailable
        if quota:
            cls = rate_limited
        elif isinstance(exc, MalformedReply):
            cls = error
        raise cls(
            f"{task}: {gave_up} after {attempt.number} attempts in {elapsed:.1f} s; "
            f"last: {_describe(exc)}"
        ) from exc
    accounting.count_call(task, accounting.RETRIED)
    log.info("gemini retry", task=task, attempt=attempt.number, error=_describe(exc))
    return delay


def _usage(response: types.GenerateContentResponse) -> Usage:
    meta = response.usage_metadata
    if meta is None:
        return Usage()
    output = (meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0)
    return Usage(meta.prompt_token_count or 0, output)


def _rate_limited(exc: BaseException) -> bool:
    """Refused for quota: 429, RESOURCE_EXHAUSTED on both the Gemini API and Vertex AI."""
    return isinstance(exc, genai_errors.APIError) and (
        exc.code == _RATE_LIMITED_STATUS or exc.status == "RESOURCE_EXHAUSTED"
    )


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
