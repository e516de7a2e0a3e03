"""Probes of a worker's dependencies: each raises while its dependency is down.

Each answers within a few seconds also when the server hangs (stopped, not
dead), so that the probing thread is never stuck on one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from typing import TYPE_CHECKING

import psycopg
import valkey
from google.cloud import pubsub_v1
from psycopg_pool import ConnectionPool

from shared.bus.dependencies import Probe
from shared.config import Settings
from shared.db.pool import check_disk, connect_kwargs, ping

if TYPE_CHECKING:
    from google import genai

PROBE_TIMEOUT_SECONDS = 2.0


def check_postgres(settings: Settings) -> None:
    """A new connection, a statement and a write to disk (a pooled connection could
    hang on a stopped server; `connect_timeout` bounds the whole login; a full disk
    answers statements). A statement sent just before the server stopped waits for
    an answer no timeout of the connection ends (the server's kernel still
    acknowledges): the probe runs on a thread of its own and is given up after
    PROBE_TIMEOUT_SECONDS + 1 (the thread ends when the server answers again)."""
    future = _PROBES.submit(_check_postgres, settings)
    try:
        future.result(timeout=PROBE_TIMEOUT_SECONDS + 1)
    except FutureTimeout:
        raise TimeoutError(
            f"Postgres did not answer within {PROBE_TIMEOUT_SECONDS + 1:g} s"
        ) from None


def _check_postgres(settings: Settings) -> None:
    assert settings.database_url
    login = {**connect_kwargs(settings), "connect_timeout": int(PROBE_TIMEOUT_SECONDS)}
    with psycopg.connect(settings.database_url, autocommit=True, **login) as conn:
        ping(conn)
        check_disk(conn)


# Probes that hang wait here; a few at most, however long a server stays stopped.
_PROBES = ThreadPoolExecutor(max_workers=4, thread_name_prefix="postgres-probe")


def drop_broken_connections(pool: ConnectionPool) -> None:
    """After an outage the pool's idle connections may be dead (a restarted server):
    check them now rather than fail a handler with each."""
    pool.check()


# The key the Valkey probe writes (a second's TTL: it never accumulates).
VALKEY_PROBE_KEY = "am:probe"


def check_valkey(client: valkey.Valkey) -> None:
    """A write, not a PING: a Valkey at its memory limit (noeviction) answers a PING
    and refuses every write, and a worker that took it for up would try its held
    messages again at once, fail, and flap. The client's socket timeout bounds it."""
    client.set(VALKEY_PROBE_KEY, b"1", px=1000)


def check_gemini_generation(client: genai.Client, model: str) -> None:
    """Does the model answer the smallest request of the kind the handlers make?
    (Its metadata would answer while generation is overloaded or rate-limited.)"""
    from google.genai import types  # loads only where Gemini is chosen

    config = types.GenerateContentConfig(max_output_tokens=1)
    client.models.generate_content(model=model, contents="ping", config=config)


def check_gemini_embedding(client: genai.Client, model: str, dim: int) -> None:
    """Does the embedding model embed one short text?"""
    from google.genai import types

    config = types.EmbedContentConfig(output_dimensionality=dim)
    # google-genai's list of parts is invariant: a list of str is one.
    client.models.embed_content(model=model, contents=["ping"], config=config)  # type: ignore[arg-type]


def openai_probes(settings: Settings, *, llm: bool, embeddings: bool) -> dict[str, Probe]:
    """The probes of the `openai` providers a worker uses (one client for both)."""
    generation = llm and settings.llm_provider == "openai"
    embedding = embeddings and settings.embedding_provider == "openai"
    if not (generation or embedding):
        return {}
    from shared.embeddings.openai_compatible import check_embedding
    from shared.llm.openai_compatible import check_generation, make_client

    client = make_client(settings)
    probes = {}
    if generation:
        probes["llm"] = Probe(partial(check_generation, client, settings.openai_model))
    if embedding:
        model, dim = settings.openai_embedding_model, settings.embedding_dim
        probes["embeddings"] = Probe(partial(check_embedding, client, model, dim))
    return probes


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
    generation = llm and settings.llm_provider == "gemini"
    embedding = embeddings and settings.embedding_provider == "gemini"
    probes.update(openai_probes(settings, llm=llm, embeddings=embeddings))
    if generation or embedding:
        from shared.llm.gemini import make_client

        # One client, kept by the probes: a client that is dropped closes its connections.
        client = make_client(settings)
        if generation:
            probes["llm"] = Probe(partial(check_gemini_generation, client, settings.llm_model))
        if embedding:
            model, dim = settings.embedding_model, settings.embedding_dim
            probes["embeddings"] = Probe(partial(check_gemini_embedding, client, model, dim))
    return probes
