"""Process metrics (Prometheus client). Each process keeps its own counters and
serves them on `AM_METRICS_PORT` when that is set (`serve_metrics`)."""

from __future__ import annotations

from prometheus_client import Counter, start_http_server

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


def serve_metrics(host: str, port: int | None) -> None:
    """Serve this process's metrics over HTTP (a daemon thread), if a port is set."""
    if port:
        start_http_server(port, addr=host)


def count_llm_tokens(provider: str, task: str, input_tokens: int, output_tokens: int) -> None:
    LLM_TOKENS.labels(provider, task, "input").inc(input_tokens)
    LLM_TOKENS.labels(provider, task, "output").inc(output_tokens)
