"""The composition root: builds pools, clients and the publisher from settings.

Entry points call `bootstrap` once; tests call it with test settings or pass
ready-made parts as overrides. Nothing here runs at import time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import valkey
import valkey.asyncio
from psycopg_pool import ConnectionPool
from valkey.backoff import NoBackoff
from valkey.retry import Retry

from shared.bus.publisher import EventPublisher, counted_publishes
from shared.config import Settings
from shared.db.migrate import check_embedding_dimension
from shared.db.pool import make_pool
from shared.llm import LLM, make_llm
from shared.session_buffer import SessionBuffer


@dataclass
class Resources:
    settings: Settings
    publisher: EventPublisher | None = None
    pool: ConnectionPool | None = None
    valkey: valkey.Valkey | None = None
    buffer: SessionBuffer | None = None
    llm: LLM | None = None
    embedder: Any = None  # shared.embeddings.Embedder
    _owned: list[Any] = field(default_factory=list)

    def close(self) -> None:
        """Flush the publisher, then close pools and clients (reverse of opening)."""
        for resource in reversed(self._owned):
            if isinstance(resource, EventPublisher):
                resource.stop()
            elif isinstance(resource, (ConnectionPool, valkey.Valkey)) or resource is self.embedder:
                resource.close()


def _valkey_options(settings: Settings, retry: object) -> dict[str, Any]:
    if not settings.valkey_url:
        raise RuntimeError("AM_VALKEY_URL is not set")
    # Short timeouts: a Valkey outage must degrade a request, not hang it. One
    # immediate retry on a connection error: after a Valkey restart, the pool's
    # idle connections are dead, and the retry opens a fresh one.
    return {
        "socket_timeout": 2.0,
        "socket_connect_timeout": 2.0,
        "health_check_interval": 30,
        "retry": retry,
        "retry_on_error": [valkey.ConnectionError],
    }


def make_valkey(settings: Settings) -> valkey.Valkey:
    assert settings.valkey_url is not None  # a process without Valkey asks for no client
    options = _valkey_options(settings, Retry(NoBackoff(), 1))
    return valkey.Valkey.from_url(settings.valkey_url, **options)


def make_async_valkey(settings: Settings) -> valkey.asyncio.Valkey:
    """The asyncio client of the API, with the same timeouts and retry."""
    from valkey.asyncio.retry import Retry as AsyncRetry

    assert settings.valkey_url is not None  # the API needs Valkey
    options = _valkey_options(settings, AsyncRetry(NoBackoff(), 1))
    return valkey.asyncio.Valkey.from_url(settings.valkey_url, **options)


def bootstrap(
    settings: Settings,
    *,
    postgres: bool = False,
    use_valkey: bool = False,
    publisher: bool = False,
    llm: bool = False,
    llm_throttle: bool = False,
    embedder: bool = False,
    pool_size: int = 8,
    block_when_full: bool = True,
    **overrides: Any,
) -> Resources:
    """Open what a process needs. A process that uses Postgres checks the
    embedding dimension first and fails with both numbers if they differ.
    `llm_throttle` (the workers'): a model provider keeps each app within
    AM_LLM_MAX_CALLS_PER_MINUTE, counted in Valkey (`throttled_llm` says when)."""
    resources = Resources(settings=settings)
    try:
        if publisher:
            # Given as `event_publisher` (`publisher` is the flag above).
            resources.publisher = overrides.get("event_publisher") or EventPublisher(
                settings, block_when_full=block_when_full, counted=counted_publishes(settings)
            )
            if "event_publisher" not in overrides:
                resources._owned.append(resources.publisher)
        if postgres:
            resources.pool = overrides.get("pool") or make_pool(
                settings,
                max_size=pool_size,
                name="agent-memory",
            )
            if "pool" not in overrides:
                resources._owned.append(resources.pool)
            with resources.pool.connection() as conn:
                check_embedding_dimension(conn, settings.embedding_dim)
        if use_valkey:
            resources.valkey = overrides.get("valkey") or make_valkey(settings)
            if "valkey" not in overrides:
                resources._owned.append(resources.valkey)
            resources.buffer = SessionBuffer(resources.valkey, settings.session_ttl_seconds)
        if llm:
            resources.llm = overrides.get("llm") or _llm(
                settings, resources.valkey, throttle=llm_throttle
            )
        if embedder:
            from shared.embeddings import make_embedder

            resources.embedder = overrides.get("embedder") or make_embedder(settings)
            if "embedder" not in overrides:
                resources._owned.append(resources.embedder)
    except BaseException:
        resources.close()
        raise
    return resources


def throttled_llm(settings: Settings) -> bool:
    """Whether a worker's model calls are limited per app (and so need Valkey)."""
    model = settings.llm_provider in ("gemini", "openai")
    return model and settings.llm_max_calls_per_minute is not None


def _llm(settings: Settings, valkey_client: valkey.Valkey | None, *, throttle: bool) -> LLM:
    """The configured LLM; with `throttle`, limited as `throttled_llm` says."""
    limit = settings.llm_max_calls_per_minute
    if not throttle or limit is None or not throttled_llm(settings):
        return make_llm(settings)
    if valkey_client is None:
        raise RuntimeError("AM_LLM_MAX_CALLS_PER_MINUTE is counted in Valkey: open it too")
    from shared.llm.throttle import Throttle

    return make_llm(settings, throttle=Throttle(valkey_client, limit))
