"""Process metrics (Prometheus client). Each process keeps its own counters and
serves them on `AM_METRICS_PORT` when that is set (`serve_metrics`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

# Counted through shared.llm.accounting, which knows the app and the worker.
LLM_CALLS = Counter(
    "agent_memory_llm_calls",
    "Model requests (each HTTP attempt; one per task of the offline provider), by "
    "app, worker, purpose and result (ok, retried, failed; and rate_limited besides: a "
    "request refused with 429, or a call that waited for AM_LLM_MAX_CALLS_PER_MINUTE).",
    ["app", "worker", "purpose", "result"],
)
LLM_TOKENS = Counter(
    "agent_memory_llm_tokens",
    "Tokens of model requests as the provider reported them, by app, worker, purpose and "
    "direction (input, output).",
    ["app", "worker", "purpose", "direction"],
)
LLM_THROTTLED_SECONDS = Counter(
    "agent_memory_llm_throttled_seconds",
    "Seconds workers waited before model calls for the app's AM_LLM_MAX_CALLS_PER_MINUTE, "
    "by app and worker.",
    ["app", "worker"],
)
LLM_INVALID_ANSWERS = Counter(
    "agent_memory_llm_invalid_answers",
    "Model answers that were not usable, by provider, purpose and fault (empty, not_json, "
    "off_schema, unknown_value, unknown_id, truncated).",
    ["provider", "purpose", "fault"],
)
LLM_CALL_SECONDS = Histogram(
    "agent_memory_llm_call_seconds",
    "Seconds of each model request (each HTTP attempt, whatever its result), by provider "
    "and purpose.",
    ["provider", "purpose"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120),
)
SUMMARY_FOLDS = Counter(
    "agent_memory_summary_folds",
    "Folds of session turns into the rolling summary, by result (stored, conflict).",
    ["result"],
)
MESSAGES = Counter(
    "agent_memory_messages",
    "Messages a worker settled, by subscription and outcome "
    "(applied, duplicate, dropped, skipped, retried, dead_lettered).",
    ["subscription", "outcome"],
)
# Counted when Pub/Sub confirms the publish: events, replays (`dlq replay`) and
# dead letters (under their `<subscription>-dlq` topic) alike.
EVENTS_PUBLISHED = Counter(
    "agent_memory_events_published",
    "Messages this process published and Pub/Sub confirmed, by topic (its short name, "
    "without AM_TOPIC_PREFIX): events, replays and dead letters (a `-dlq` topic).",
    ["topic"],
)
# What no reporting publisher counted (shared.bus.attributes.COUNTED): the figures
# take each in as published when a worker first receives it.
MESSAGES_UNCOUNTED = Counter(
    "agent_memory_uncounted_messages",
    "Messages a worker received for the first time (delivery attempt 1) that no "
    "publisher of agent-memory counted (a script's, a tool's, Cloud Scheduler's), "
    "by subscription.",
    ["subscription"],
)
HANDLER_SECONDS = Histogram(
    "agent_memory_handler_seconds",
    "Time from a message's hand-over to its settling, by subscription.",
    ["subscription"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
DELIVERY_LAG_SECONDS = Histogram(
    "agent_memory_delivery_lag_seconds",
    "Time from a message's publish to its hand-over to this worker, by subscription: "
    "how far behind the worker is (it grows with the subscription's backlog).",
    ["subscription"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
MESSAGES_IN_FLIGHT = Gauge(
    "agent_memory_messages_in_flight",
    "Messages this worker holds and has not settled, by subscription (unary pull: "
    "every leased message, prefetched ones included; streaming pull: those handed "
    "to a handler).",
    ["subscription"],
)
WORKER_CONCURRENCY = Gauge(
    "agent_memory_worker_concurrency",
    "Handlers this worker runs at once per subscription (AM_WORKER_CONCURRENCY or the "
    "kind's default): in flight over this is how busy it is.",
    ["subscription"],
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
DEPENDENCY_UP = Gauge(
    "agent_memory_dependency_up",
    "1 while a worker's dependency (valkey, postgres, pubsub, llm, embeddings) answers, "
    "0 while it is down and the worker holds its messages.",
    ["dependency"],
)
MESSAGES_HELD = Gauge(
    "agent_memory_messages_held",
    "Messages a worker holds, leased and unsettled, until a dependency is back.",
    ["subscription"],
)
DB_TRANSACTION_SECONDS = Histogram(
    "agent_memory_db_transaction_seconds",
    "How long a unit of work kept its Postgres connection, from the checkout to the "
    "commit or rollback (no model or embedding call happens meanwhile), by process.",
    ["worker"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
EXTRACTION_SKIPPED = Counter(
    "agent_memory_extraction_skipped",
    "Turns archived but never sent to the model: nothing in them worth remembering, by "
    "reason (greeting, acknowledgement, tool_output, few_words).",
    ["reason"],
)
EXTRACTION_WINDOWS_WAITING = Gauge(
    "agent_memory_extraction_turns_waiting",
    "Turns archived and waiting in an extraction window (all sessions), as the last "
    "idle-window check of this worker counted them.",
)
PROFILE_VALUES_REFUSED = Counter(
    "agent_memory_profile_values_refused",
    "Profile values not stored, by app and reason: unknown_field (the app's profile schema "
    "has no such field) or wrong_type (the value does not fit its field).",
    ["app", "reason"],
)
MEMORY_CHANGES_PUBLISHED = Counter(
    "agent_memory_memory_changes_published",
    "memory.changed.v1 events Pub/Sub confirmed, published from the outbox by this process.",
)
EXPIRED = Counter(
    "agent_memory_expired",
    "What the compaction sweeps retired or deleted as expired: memories past their expire_at "
    "(retired, each a memory.changed.v1 EXPIRED) and revisions past the app's revisions TTL.",
    ["what"],
)
API_REQUEST_SECONDS = Histogram(
    "agent_memory_api_request_seconds",
    "Read API request latency, by method, route (its template) and status.",
    ["method", "route", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


# What the process's readiness check answers: the names of what is down (empty:
# ready), or each with the error that said so.
Readiness = Callable[[], Iterable[str] | Mapping[str, str]]


def serve_metrics(host: str, port: int | None, down: Readiness | None = None) -> None:
    """Serve this process's metrics over HTTP (a daemon thread), if a port is set;
    also `/healthz` and, given `down`, `/readyz` (503 naming what is down)."""
    if not port:
        return
    metrics = make_wsgi_app()

    def app(environ: dict, start_response: Callable) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            return _json(start_response, "200 OK", {"status": "ok"})
        if path == "/readyz":
            found = down() if down is not None else []
            missing = sorted(found)
            status = "503 Service Unavailable" if missing else "200 OK"
            body: dict[str, object] = {
                "status": "unavailable" if missing else "ready",
                "down": missing,
            }
            if isinstance(found, Mapping) and found:
                # The error's class only (DiskFull, OutOfMemoryError, ConnectionTimeout):
                # the why, without the hosts and driver messages the log holds.
                body["reasons"] = {k: str(v).split(":", 1)[0] for k, v in found.items()}
            return _json(start_response, status, body)
        return metrics(environ, start_response)

    server = make_server(host, port, app, ThreadingWSGIServer, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()


def _json(start_response: Callable, status: str, body: dict) -> list[bytes]:
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json")])
    return [data]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        """Scrapes and probes are not worth a log line each."""


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
