"""Process metrics (Prometheus client). Each process keeps its own counters and
serves them on `AM_METRICS_PORT` when that is set (`serve_metrics`)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram, start_http_server

LLM_TOKENS = Counter(
    "agent_memory_llm_tokens",
    "Tokens spent on LLM calls, by provider, task and direction (input or output).",
    ["provider", "task", "direction"],
)
LLM_CALLS = Counter(
    "agent_memory_llm_calls",
    "LLM requests, by provider, task and result (ok, retried, failed).",
    ["provider", "task", "result"],
)
SUMMARY_FOLDS = Counter(
    "agent_memory_summary_folds",
    "Folds of session turns into the rolling summary, by result (stored, conflict).",
    ["result"],
)
MESSAGES = Counter(
    "agent_memory_messages",
    "Messages a worker settled, by subscription and outcome "
    "(acked, duplicate, dropped, skipped, retried, dead_lettered).",
    ["subscription", "outcome"],
)
HANDLER_SECONDS = Histogram(
    "agent_memory_handler_seconds",
    "Time from a message's hand-over to its settling, by subscription.",
    ["subscription"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
DEAD_LETTER_PUBLISHES = Counter(
    "agent_memory_dead_letter_publishes",
    "Messages a worker published to a dead-letter topic, by subscription and result "
    "(ok, failed: the message was nacked instead).",
    ["subscription", "result"],
)
STORE_ERRORS = Counter(
    "agent_memory_store_errors",
    "Errors of the session store (valkey) or the database (postgres) that reached a "
    "handler or a request.",
    ["store"],
)
API_REQUEST_SECONDS = Histogram(
    "agent_memory_api_request_seconds",
    "Read API request latency, by method, route (its template) and status.",
    ["method", "route", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


def serve_metrics(host: str, port: int | None) -> None:
    """Serve this process's metrics over HTTP (a daemon thread), if a port is set."""
    if port:
        start_http_server(port, addr=host)


def count_llm_tokens(provider: str, task: str, input_tokens: int, output_tokens: int) -> None:
    LLM_TOKENS.labels(provider, task, "input").inc(input_tokens)
    LLM_TOKENS.labels(provider, task, "output").inc(output_tokens)


def store_of(exc: BaseException | None) -> str | None:
    """`valkey` or `postgres` if `exc`, or an exception it was raised from, is an
    error of that store; None otherwise."""
    import psycopg
    import valkey

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, valkey.exceptions.ValkeyError):
            return "valkey"
        if isinstance(exc, psycopg.Error):
            return "postgres"
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def count_store_error(exc: BaseException | None) -> None:
    store = store_of(exc)
    if store is not None:
        STORE_ERRORS.labels(store).inc()
