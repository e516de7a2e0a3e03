"""The settings of the services and how their processes run: where the external
services are, Pub/Sub's topology, the workers, the API and the short-term memory.
`shared.config.Settings` adds what the memory does with them (models, retrieval,
consolidation, compaction, storage, the local stack, metrics and logs); the two
are one class, split only to keep each module to one concern.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared import setting_checks as checks

# Pub/Sub's limit on one message, less room for its attributes and ordering key.
MAX_PUBSUB_MESSAGE_BYTES = 10_000_000 - 64 * 1024


class ServiceSettings(BaseSettings):
    """The first part of `Settings` (see the module docstring); never built alone."""

    model_config = SettingsConfigDict(
        env_prefix="AM_", extra="ignore", populate_by_name=True, use_attribute_docstrings=True
    )

    # External services. Unset means "the local stack provides it".
    database_url: str | None = None
    """PostgreSQL with pgvector; `agent-memory up` starts its own when unset"""
    database_iam_auth: bool = False
    """`true`: AlloyDB IAM database authentication. The URL names the IAM user (the service
    account's email without `.gserviceaccount.com`, `@` written `%40`) and no password; every new
    connection logs in with a fresh access token of the Application Default Credentials (scope
    `alloydb.login`, refreshed 5 minutes before expiry) and TLS (`sslmode=require` unless the URL
    asks for stricter; weaker is refused)"""
    valkey_url: str | None = None
    """Valkey (or Redis); `agent-memory up` starts its own when unset"""
    pubsub_emulator_host: str | None = Field(
        default=None, validation_alias=AliasChoices("PUBSUB_EMULATOR_HOST", "pubsub_emulator_host")
    )
    """`host:port` of a Pub/Sub emulator; `agent-memory up` starts one when unset; the Google client
    libraries read it too"""
    google_cloud_project: str = Field(
        default="agent-memory-local",
        validation_alias=AliasChoices("GOOGLE_CLOUD_PROJECT", "google_cloud_project"),
    )
    """project of the topics and subscriptions"""
    pubsub_backend: Literal["emulator", "gcp"] = "emulator"
    """`emulator`: use `PUBSUB_EMULATOR_HOST` or let `up` start one; `gcp`: real Pub/Sub in
    `GOOGLE_CLOUD_PROJECT` with Application Default Credentials"""

    # Pub/Sub topology.
    topic_prefix: str = "agent-memory-"
    """prefix of every topic, subscription and schema name"""
    # The subscriptions dead-letter after one delivery more (shared/bus/admin.py): the
    # backstop for a message no worker ever settled.
    max_delivery_attempts: int = Field(default=5, ge=5, le=99)
    """attempts of an event's own failures before the worker dead-letters it; the subscriptions'
    dead-letter policy allows one delivery more, on which the worker dead-letters a message it
    never settled. An outage of a dependency spends none"""
    ack_deadline_seconds: int = Field(default=30, ge=10, le=600)
    """subscriptions' ack deadline (how soon a crashed worker's messages return)"""
    retry_min_backoff_seconds: int = Field(default=1, ge=0, le=600)
    """retry policy: first redelivery delay after an event's failure (the worker waits it itself on
    the emulator)"""
    retry_max_backoff_seconds: int = Field(default=60, ge=0, le=600)
    """retry policy: longest redelivery delay"""

    # Workers. `auto` pulls with unary Pull on the emulator because its streaming pull
    # never releases a closed stream (shared/bus/unary_pull.py).
    pull_mode: Literal["auto", "streaming", "unary"] = "auto"
    """`streaming`, `unary`, or `auto` (unary pull on the emulator, streaming pull on Pub/Sub; why:
    [local-stack.md](local-stack.md#the-pubsub-emulator))"""
    # Each worker kind is its own deployment, so the default is the kind's own.
    worker_concurrency: int | None = Field(default=None, ge=1, le=1000)
    """handlers running at once per subscription in this worker process; up to 4× as many
    messages are leased ahead. Unset: per kind, summary `64` (Valkey only), extraction `16`,
    compaction `4`"""
    db_pool_size: int | None = Field(default=None, ge=1, le=1000)
    """Postgres connections of a worker process. A handler holds one only for its short reads and
    its one transaction, never across a model or embedding call. Unset: the worker's concurrency, at
    most `4`"""
    scale: str = ""
    """`agent-memory up` only: replicas per worker kind, `extraction=3,summary=2` (1–8 each; each
    kind unnamed runs one); `up --scale KIND=N` overrides it per kind"""
    worker_shutdown_seconds: float = Field(default=8.0, gt=0, le=600)
    """on SIGTERM, how long in-flight handlers may finish (inside Cloud Run's 10 s grace period)"""
    lease_extension_seconds: int = Field(default=10, ge=10, le=600)
    """how far each lease extension reaches (bounds redelivery after a crash)"""
    publish_timeout_seconds: float = Field(default=10.0, gt=0)
    """how long a publish may wait for Pub/Sub's confirmation"""
    publish_queue_limit: int = Field(default=10_000, ge=1, le=1_000_000)
    """messages a process lets wait for Pub/Sub's confirmation; beyond them a worker's publish
    waits and the API answers `503` with `Retry-After` (backpressure)"""
    dependency_retry_min_seconds: float = Field(default=0.5, gt=0, le=60)
    """a worker whose dependency is down holds its messages and probes it again after this long,
    doubling each time (with jitter) …"""
    dependency_retry_max_seconds: float = Field(default=30.0, gt=0, le=600)
    """… up to this long between probes"""
    dependency_probe_seconds: float = Field(default=10.0, gt=0, le=600)
    """how often a worker probes Postgres and Valkey while they are up (a server that hangs raises
    no error)"""

    # API.
    api_host: str = "127.0.0.1"
    """API listen address"""
    api_port: int = Field(default=8080, ge=1, le=65535)
    """API listen port"""
    default_app: str = "default"
    """tenant of every request when authentication is disabled, and of the development key
    `agent-memory up` creates"""
    auth_disabled: bool = False
    """`true` turns API-key authentication off (every request is then `AM_DEFAULT_APP`'s, and the
    API logs a warning at start-up); only an explicit `true` does; never in production"""
    auth_cache_seconds: float = Field(default=5.0, ge=0, le=300)
    """how long a verified API key is trusted before it is looked up again (a revoked key stops
    working within this time; `0`: look up every request)"""
    auth_lookup_timeout_seconds: float = Field(default=2.0, gt=0, le=60)
    """how long a request waits for its key's lookup in Postgres before it answers `503`"""
    auth_stale_seconds: float = Field(default=300.0, ge=0, le=86400)
    """while Postgres cannot be reached, a key verified within this time is still accepted, so turns
    are recorded through a database outage (`0`: never)"""
    # The default fits the largest legal request: a memories:generate of 200 events at
    # the text limit, a 10 MB event.
    max_request_bytes: int = Field(default=16 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024)
    """the largest request body the API reads (16 MiB by default): a larger one is answered `413`
    before it is read (by its `Content-Length`, or as soon as a body sent without one passes it)"""
    max_message_bytes: int = Field(default=32 * 1024, ge=1)
    """limit per user or assistant message text (UTF-8)"""
    max_tool_events_bytes: int = Field(default=256 * 1024, ge=1)
    """limit on a turn's tool events together"""
    max_event_bytes: int = Field(
        default=MAX_PUBSUB_MESSAGE_BYTES, ge=1024, le=MAX_PUBSUB_MESSAGE_BYTES
    )
    """the largest event the API publishes (its JSON body; Pub/Sub takes 10 MB per message, less
    room for attributes): a request whose event would be larger answers `413` naming the field
    that makes it so"""

    # Short-term memory (the summary worker's summarize-before-trim).
    summary_trigger_turns: int = Field(default=10, ge=1)
    """the summary worker folds when the buffer holds more turns than this …"""
    summary_trigger_tokens: int = Field(default=4000, ge=1)
    """… or more tokens than this"""
    summary_kept_turns: int = Field(
        default=4,
        ge=0,
        validation_alias=AliasChoices(
            "AM_SUMMARY_KEPT_TURNS", "AM_SUMMARY_WINDOW_TURNS", "summary_kept_turns"
        ),
    )
    """newest turns a fold leaves in the buffer (`AM_SUMMARY_WINDOW_TURNS`, its former name, is
    still read)"""
    summary_max_tokens: int = Field(default=600, ge=20)
    """bound on the rolling summary's length"""
    summary_max_conflicts: int = Field(default=20, ge=1)
    """folds of one message that may lose to other writers before it is retried later"""

    _iam_url = field_validator("database_iam_auth")(checks.iam_url)
    _explicit_true = field_validator("auth_disabled", mode="before")(checks.explicit_true)
    _scale_parses = field_validator("scale")(checks.scale_parses)
    _prefix_is_a_resource_name = field_validator("topic_prefix")(checks.resource_prefix)
