"""Probes of a worker's dependencies: each raises while its dependency is down.

Each answers within a few seconds also when the server hangs (stopped, not
dead), so that the probing thread is never stuck on one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import psycopg
import valkey
from google.cloud import pubsub_v1
from psycopg_pool import ConnectionPool

from shared.bus.dependencies import Probe
from shared.config import Settings
from shared.db.pool import connect_kwargs

PROBE_TIMEOUT_SECONDS = 2.0


def check_postgres(settings: Settings) -> None:
    """A new connection and `SELECT 1` (a pooled one could hang on a stopped server;
    `connect_timeout` bounds the whole login)."""
    assert settings.database_url
    login = {**connect_kwargs(settings), "connect_timeout": int(PROBE_TIMEOUT_SECONDS)}
    with psycopg.connect(settings.database_url, autocommit=True, **login) as conn:
        conn.execute("SELECT 1")


def drop_broken_connections(pool: ConnectionPool) -> None:
    """After an outage the pool's idle connections may be dead (a restarted server):
    check them now rather than fail a handler with each."""
    pool.check()


def check_valkey(client: valkey.Valkey) -> None:
    client.ping()  # the client's socket timeout bounds it


def check_gemini(settings: Settings, model: str) -> None:
    """Does the endpoint answer, and take our credentials? (No tokens are spent.)"""
    from shared.llm.gemini import make_client

    make_client(settings).models.get(model=model)


def check_pubsub(subscriber: pubsub_v1.SubscriberClient, paths: Sequence[str]) -> None:
    """Pub/Sub answers and the worker's subscriptions exist (an emulator that was
    restarted has none until the topology is applied again)."""
    for path in paths:
        subscriber.get_subscription(request={"subscription": path}, timeout=PROBE_TIMEOUT_SECONDS)


def worker_probes(
    settings: Settings,
    *,
    pool: ConnectionPool | None,
    valkey_client: valkey.Valkey | None,
    llm: bool,
    embeddings: bool,
    subscriber: pubsub_v1.SubscriberClient,
    subscription_paths: Sequence[str],
) -> dict[str, Probe]:
    """The probes of what a worker uses; Postgres and Valkey also while they are up."""
    probes = {"pubsub": Probe(partial(check_pubsub, subscriber, subscription_paths))}
    if pool is not None:
        probes["postgres"] = Probe(
            partial(check_postgres, settings),
            periodic=True,
            recovered=partial(drop_broken_connections, pool),
        )
    if valkey_client is not None:
        probes["valkey"] = Probe(partial(check_valkey, valkey_client), periodic=True)
    if llm and settings.llm_provider == "gemini":
        probes["llm"] = Probe(partial(check_gemini, settings, settings.llm_model))
    if embeddings and settings.embedding_provider == "gemini":
        probes["embeddings"] = Probe(partial(check_gemini, settings, settings.embedding_model))
    return probes
