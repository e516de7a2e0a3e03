"""What to do after a model endpoint's request failed, the same for every provider
and purpose (generation and embeddings of `gemini` and `openai`).

Each provider reads its own client's exceptions into a `Refusal` (retried or not,
a quota, our credentials refused, and how long the endpoint asked us to wait);
`retry_delay` then decides: 429, 408, 5xx, timeouts and connection errors are
retried with jittered exponential backoff, or after the `Retry-After` the
endpoint sent; no attempt starts after `AM_LLM_RETRY_SECONDS` from the first,
so a task takes at most that plus one call's timeout. Other 4xx are not retried.
Retries that end on 429 raise the provider's rate-limited error: the worker holds
the message without spending its delivery attempts (`shared.bus.settling`).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import structlog

from shared.config import Settings
from shared.llm import accounting

log = structlog.get_logger("agent_memory.llm")

RATE_LIMITED_STATUS = 429
RETRIED_STATUS = frozenset({408, RATE_LIMITED_STATUS})
CREDENTIALS_REFUSED = frozenset({401, 403})
BACKOFF_CAP_SECONDS = 8.0


@dataclass(frozen=True)
class Refusal:
    """A failed request, as its provider reads it."""

    description: str  # "HTTP 503 UNAVAILABLE", "ReadTimeout: ..."
    retry: bool  # another attempt may succeed
    quota: bool = False  # refused for quota (429, RESOURCE_EXHAUSTED)
    credentials: bool = False  # our credentials were refused (401, 403)
    retry_after: float | None = None  # seconds the endpoint asked us to wait


def status_refusal(status: int, description: str, retry_after: float | None) -> Refusal:
    """The refusal of an HTTP status answered by the endpoint."""
    return Refusal(
        description,
        retry=status in RETRIED_STATUS or status >= 500,
        quota=status == RATE_LIMITED_STATUS,
        credentials=status in CREDENTIALS_REFUSED,
        retry_after=retry_after,
    )


@dataclass(frozen=True)
class Attempt:
    task: str  # the metrics' purpose label
    number: int  # 1 for the first
    started: float  # time.monotonic() of the first


@dataclass(frozen=True)
class GiveUp:
    """What a caller raises when retries end: `error` when the event may be the
    cause (a refused request), `unavailable` when the endpoint is (it stayed down or
    slow, or refused our credentials), `rate_limited` when the last refusal was for
    quota."""

    error: type[Exception]
    unavailable: type[Exception]
    rate_limited: type[Exception]
    what: str  # "no usable reply", "no embeddings"


def retry_delay(
    refusal: Refusal, exc: BaseException, attempt: Attempt, settings: Settings, give_up: GiveUp
) -> float:
    """The wait before the next attempt after `exc`, or the exception `give_up`
    names when there is none. Counts the attempt in the metrics, `retried` or
    `failed`, and a 429 as `rate_limited` besides."""
    task = attempt.task
    if refusal.quota:
        accounting.count_call(task, accounting.RATE_LIMITED)
    if not refusal.retry:
        accounting.count_call(task, accounting.FAILED)
        cls = give_up.unavailable if refusal.credentials else give_up.error
        raise cls(f"{task}: {refusal.description}") from exc
    if refusal.retry_after is not None:
        delay = refusal.retry_after
    else:
        delay = backoff(settings.llm_retry_initial_seconds, attempt.number)
    elapsed = time.monotonic() - attempt.started
    if elapsed + delay > settings.llm_retry_seconds:
        accounting.count_call(task, accounting.FAILED)
        cls = give_up.rate_limited if refusal.quota else give_up.unavailable
        waited = "" if refusal.retry_after is None else f" (asked to wait {delay:g} s more)"
        raise cls(
            f"{task}: {give_up.what} after {attempt.number} attempts in {elapsed:.1f} s"
            f"{waited}; last: {refusal.description}"
        ) from exc
    accounting.count_call(task, accounting.RETRIED)
    log.info("model retry", task=task, attempt=attempt.number, error=refusal.description)
    return delay


def backoff(initial: float, attempt: int) -> float:
    """Full jitter: uniform in [0, min(cap, initial * 2^(attempt-1))], at least 10 ms."""
    ceiling = min(BACKOFF_CAP_SECONDS, initial * 2 ** (attempt - 1))
    return max(0.01, random.uniform(0, ceiling))  # noqa: S311 - jitter, not security


def retry_after(headers: Any) -> float | None:
    """The wait an HTTP answer asks for: `retry-after-ms` (OpenAI's), else
    `Retry-After` in seconds or as an HTTP date; None when it asks none."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
