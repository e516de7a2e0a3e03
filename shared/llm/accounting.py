"""Who a model call is for, and counting it.

Every model request is counted in `agent_memory_llm_calls_total`, timed in
`agent_memory_llm_call_seconds` and its tokens counted in
`agent_memory_llm_tokens_total`, labelled with the app (tenant) it was made
for, the process that made it and its purpose (the task: summarize, extract,
consolidate, decompose, compact, embed_documents, embed_queries).

- The worker name is the process's (`api`, `summary`, `extraction`,
  `compaction`, `cli`), set once at start (`set_worker`); "" until then.
- The app is the message's or the request's, in a context variable: a worker's
  dispatcher sets it around each message (`for_app`), the API for each request
  (`set_app`; `asyncio.to_thread` copies it to the thread a call runs on).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from shared.metrics import (
    LLM_CALL_SECONDS,
    LLM_CALLS,
    LLM_INVALID_ANSWERS,
    LLM_THROTTLED_SECONDS,
    LLM_TOKENS,
)

# The `result` label. Each request is one of the first three, so their sum is the
# requests made; `rate_limited` is counted besides: a request refused with 429
# (also `retried` or `failed`), or a call that waited for the app's limit first.
OK = "ok"
RETRIED = "retried"  # failed, and another attempt follows
FAILED = "failed"  # failed, and the task gives up
RATE_LIMITED = "rate_limited"

_worker = ""
_app: ContextVar[str] = ContextVar("agent_memory_llm_app", default="")


def set_worker(name: str) -> None:
    """Name this process in the metrics (once, at start)."""
    global _worker
    _worker = name


def worker() -> str:
    return _worker


def current_app() -> str:
    """The app the calls made here are for ("" when none is known)."""
    return _app.get()


@contextmanager
def for_app(app: str) -> Iterator[None]:
    """Calls made within are for `app`."""
    token = _app.set(app)
    try:
        yield
    finally:
        _app.reset(token)


def set_app(app: str) -> None:
    """Calls made from here on in this context are for `app`: for a context that ends
    with its task, such as an API request's (no reset needed)."""
    _app.set(app)


def count_call(purpose: str, result: str) -> None:
    LLM_CALLS.labels(current_app(), _worker, purpose, result).inc()


def count_tokens(purpose: str, input_tokens: int, output_tokens: int) -> None:
    app = current_app()
    LLM_TOKENS.labels(app, _worker, purpose, "input").inc(input_tokens)
    LLM_TOKENS.labels(app, _worker, purpose, "output").inc(output_tokens)


def count_throttled(app: str, purpose: str, seconds: float) -> None:
    """A call for `app` waited `seconds` for the app's limit before it was sent."""
    LLM_CALLS.labels(app, _worker, purpose, RATE_LIMITED).inc()
    LLM_THROTTLED_SECONDS.labels(app, _worker).inc(seconds)


def count_invalid(provider: str, purpose: str, fault: str) -> None:
    """A model answer of `provider` for `purpose` was not usable, for `fault`."""
    LLM_INVALID_ANSWERS.labels(provider, purpose, fault).inc()


@contextmanager
def timed(provider: str, purpose: str) -> Iterator[None]:
    """Time one model request, whatever its result."""
    started = time.perf_counter()
    try:
        yield
    finally:
        LLM_CALL_SECONDS.labels(provider, purpose).observe(time.perf_counter() - started)
