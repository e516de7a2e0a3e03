"""Typed settings read from the environment, validated once at start-up.

Every process builds one `Settings` in its entry point (never at import time)
and hands it to `bootstrap`. A bad value fails fast with a message naming the
variable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

# Pub/Sub's limit on one message, less room for its attributes and ordering key.
MAX_PUBSUB_MESSAGE_BYTES = 10_000_000 - 64 * 1024

WORKER_KINDS = ("summary", "extraction", "compaction")
# Replicas of one kind `agent-memory up` runs on one machine: eight extraction
# replicas at their default concurrency hold 128 of the local Postgres's 200
# connections.
MAX_LOCAL_REPLICAS = 8


def parse_scale(items: str | list[str]) -> dict[str, int]:
    """`extraction=3,summary=2` (or a list of such items) as {kind: replicas};
    a later item of a kind wins. ValueError quotes the item that is wrong."""
    if isinstance(items, str):
        items = [items]
    scale: dict[str, int] = {}
    for part in (p.strip() for item in items for p in item.split(",")):
        if not part:
            continue
        kind, equals, count = (s.strip() for s in part.partition("="))
        if not equals:
            raise ValueError(f"{part!r}: expected KIND=REPLICAS, e.g. extraction=3")
        if kind not in WORKER_KINDS:
            raise ValueError(
                f"{part!r}: unknown worker kind {kind!r}; known: {', '.join(WORKER_KINDS)}"
            )
        if not count.isdigit():
            raise ValueError(f"{part!r}: replicas must be a whole number, not {count!r}")
        replicas = int(count)
        if not 1 <= replicas <= MAX_LOCAL_REPLICAS:
            raise ValueError(
                f"{part!r}: replicas must be from 1 to {MAX_LOCAL_REPLICAS}, not {replicas}"
            )
        scale[kind] = replicas
    return scale


class ConfigError(Exception):
    """A configuration variable is missing or invalid."""


class Settings(BaseSettings):
    """All configuration of agent-memory. Environment names are in `Field(alias=...)`
    where they do not follow the `AM_` prefix; docs/configuration.md lists every variable."""

    model_config = SettingsConfigDict(env_prefix="AM_", extra="ignore", populate_by_name=True)

    # External services. Unset means "the local stack provides it".
    database_url: str | None = None
    # AlloyDB IAM database authentication: an access token as the password of
    # every new connection, TLS required (shared/db/iam.py).
    database_iam_auth: bool = False
    valkey_url: str | None = None
    pubsub_emulator_host: str | None = Field(
        default=None, validation_alias=AliasChoices("PUBSUB_EMULATOR_HOST", "pubsub_emulator_host")
    )
    google_cloud_project: str = Field(
        default="agent-memory-local",
        validation_alias=AliasChoices("GOOGLE_CLOUD_PROJECT", "google_cloud_project"),
    )

    # `emulator`: use PUBSUB_EMULATOR_HOST, or let `up` start one. `gcp`: real
    # Pub/Sub in GOOGLE_CLOUD_PROJECT with Application Default Credentials.
    pubsub_backend: Literal["emulator", "gcp"] = "emulator"

    # Pub/Sub topology.
    topic_prefix: str = "agent-memory-"
    # The worker's attempts; the subscriptions dead-letter after one more (see
    # shared/bus/admin.py), the backstop for a message no worker ever settled.
    max_delivery_attempts: int = Field(default=5, ge=5, le=99)
    ack_deadline_seconds: int = Field(default=30, ge=10, le=600)
    retry_min_backoff_seconds: int = Field(default=1, ge=0, le=600)
    retry_max_backoff_seconds: int = Field(default=60, ge=0, le=600)

    # Workers. `auto` pulls with unary Pull on the emulator (its streaming pull
    # never releases a closed stream; see shared/bus/unary_pull.py) and with
    # streaming pull on Pub/Sub.
    pull_mode: Literal["auto", "streaming", "unary"] = "auto"
    # Unset: the worker kind's own default (summary 64: Valkey only; extraction 16:
    # the size of its Postgres pool). Each worker kind is its own deployment.
    worker_concurrency: int | None = Field(default=None, ge=1, le=1000)
    # Replicas per worker kind that `agent-memory up` runs: `extraction=3,summary=2`
    # (each kind unnamed runs one); `up --scale` overrides it per kind.
    scale: str = ""
    worker_shutdown_seconds: float = Field(default=8.0, gt=0, le=600)
    lease_extension_seconds: int = Field(default=10, ge=10, le=600)
    publish_timeout_seconds: float = Field(default=10.0, gt=0)
    # A worker whose dependency is down holds its messages and probes the
    # dependency with backoff from the minimum to the maximum (and Postgres and
    # Valkey every AM_DEPENDENCY_PROBE_SECONDS while they are up).
    dependency_retry_min_seconds: float = Field(default=0.5, gt=0, le=60)
    dependency_retry_max_seconds: float = Field(default=30.0, gt=0, le=600)
    dependency_probe_seconds: float = Field(default=10.0, gt=0, le=600)

    # Read API.
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8080, ge=1, le=65535)
    default_app: str = "default"
    # Tenant authentication: every /v1 route needs `Authorization: Bearer <key>`.
    # Only an explicit `true` turns it off (every request is then AM_DEFAULT_APP's).
    auth_disabled: bool = False
    # A verified key is trusted this long before it is looked up again (so a
    # revoked key stops working within this time; 0: look up every request).
    auth_cache_seconds: float = Field(default=5.0, ge=0, le=300)
    # How long a request waits for its key's lookup before answering 503.
    auth_lookup_timeout_seconds: float = Field(default=2.0, gt=0, le=60)
    # While Postgres is unreachable, a key verified within this time is still
    # trusted (0: never), so recording turns goes on through a database outage.
    auth_stale_seconds: float = Field(default=300.0, ge=0, le=86400)
    # The largest request body the API reads; a larger one is refused with 413
    # before it is read. The default fits the largest legal request (a
    # memories:generate of 200 events at the text limit, a 10 MB event).
    max_request_bytes: int = Field(default=16 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024)
    max_message_bytes: int = Field(default=32 * 1024, ge=1)
    max_tool_events_bytes: int = Field(default=256 * 1024, ge=1)
    # The largest event the API publishes (its JSON body): a request whose event
    # would be larger is refused with 413. Pub/Sub takes messages of up to 10 MB.
    max_event_bytes: int = Field(
        default=MAX_PUBSUB_MESSAGE_BYTES, ge=1024, le=MAX_PUBSUB_MESSAGE_BYTES
    )

    # Short-term memory (the summary worker's summarize-before-trim).
    summary_trigger_turns: int = Field(default=10, ge=1)
    summary_trigger_tokens: int = Field(default=4000, ge=1)
    summary_window_turns: int = Field(default=4, ge=0)
    summary_max_tokens: int = Field(default=600, ge=20)
    # Cap on the attempts to store one fold when other writers keep winning.
    summary_max_conflicts: int = Field(default=20, ge=1)

    # LLM. `rules` is deterministic and offline; `gemini` uses google-genai with
    # an API key when one is set, else Vertex AI with Application Default Credentials.
    llm_provider: Literal["rules", "gemini"] = "rules"
    llm_model: str = "gemini-3.5-flash"
    gemini_api_key: SecretStr | None = None
    gemini_base_url: str | None = None  # another endpoint (tests: the fake Gemini server)
    gemini_location: str = "global"  # Vertex AI location
    llm_timeout_seconds: float = Field(default=30.0, gt=0)
    # Retries on 429, 5xx, timeouts and malformed replies stop once this much time
    # has gone, counted from the first attempt.
    llm_retry_seconds: float = Field(default=60.0, ge=0)
    llm_retry_initial_seconds: float = Field(default=0.5, gt=0)

    # Embeddings. `hash` is deterministic and offline (lexical feature hashing);
    # `gemini` uses google-genai with the LLM's credentials and endpoint.
    embedding_provider: Literal["hash", "gemini"] = "hash"
    embedding_model: str = "text-embedding-005"
    embedding_batch_size: int = Field(default=100, ge=1, le=250)
    # Identical query texts within this window reuse their embedding (0: no cache).
    query_cache_seconds: float = Field(default=60.0, ge=0)
    query_cache_size: int = Field(default=1024, ge=1)

    # Long-term memory: hybrid retrieval, consolidation, context.
    search_vector_weight: float = Field(default=0.4, ge=0)
    search_text_weight: float = Field(default=0.6, ge=0)
    search_rrf_k: int = Field(default=60, ge=1)
    # Rows each ranker contributes before fusion.
    search_candidates: int = Field(default=30, ge=1, le=1000)
    search_text_max_frequency: float = Field(default=0.02, gt=0, le=1)
    search_text_scan_limit: int = Field(default=1000, ge=1)
    # Scopes with fewer rows are ranked by exact distance, not through HNSW.
    search_exact_below: int = Field(default=5000, ge=0, le=100_000)
    consolidation_neighbours: int = Field(default=5, ge=1, le=50)
    context_token_budget: int = Field(default=2000, ge=100, le=100_000)
    context_recent_turns: int = Field(default=4, ge=0, le=100)
    operation_wait_seconds: float = Field(default=30.0, gt=0, le=300)

    # Tool permissions. Exempt tools are always allowed (comma-separated names).
    permission_exempt_tools: str = "search_archived_memory"
    permission_grant_ttl_seconds: int = Field(default=300, ge=1, le=3600)
    permission_cache_seconds: float = Field(default=2.0, ge=0, le=60)

    # Compaction (the compaction worker and `agent-memory compact`).
    compaction_retention_days: int = Field(default=30, ge=1)
    compaction_batch_limit: int = Field(default=50, ge=1, le=1000)
    compaction_max_tokens: int = Field(default=1500, ge=100)

    # Storage.
    embedding_dim: int = Field(default=768, ge=1, le=2000)
    session_ttl_seconds: int = Field(default=7 * 24 * 3600, ge=60)
    db_connect_timeout_seconds: float = Field(default=5.0, gt=0)

    # Local stack (`agent-memory up`).
    data_dir: Path = Path(".local")
    postgres_port: int | None = Field(default=None, ge=1, le=65535)
    # The embedded PostgreSQL's buffer cache. The HNSW index of 200,000 memories
    # of 768 dimensions is about 800 MB; searches that find it in the cache take
    # about half the time (bench/retrieval.py).
    postgres_shared_buffers: str = Field(default="1GB", pattern=r"^[1-9][0-9]*(kB|MB|GB)$")
    valkey_port: int | None = Field(default=None, ge=1, le=65535)
    pubsub_port: int | None = Field(default=None, ge=1, le=65535)
    pubsub_emulator_bin: Path | None = None

    # Prometheus metrics of this process on http://AM_METRICS_HOST:AM_METRICS_PORT/
    # (unset: not served). `up` gives each service a free port.
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    metrics_host: str = "127.0.0.1"
    # OpenTelemetry tracing (shared/tracing.py): off, otlp or console.
    tracing: Literal["off", "otlp", "console"] = "off"

    # Logging.
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("database_iam_auth")
    @classmethod
    def _iam_url(cls, value: bool, info: ValidationInfo) -> bool:
        url = info.data.get("database_url")
        if value and url:
            from shared.db.iam import check_iam_url

            check_iam_url(url)  # a ValueError names what is wrong with AM_DATABASE_URL
        return value

    @field_validator("auth_disabled", mode="before")
    @classmethod
    def _explicit_true(cls, value: object) -> object:
        # Only an explicit `true` turns authentication off ("1", "yes", "on" do not).
        if isinstance(value, str) and value.strip().lower() not in ("true", "false"):
            raise ValueError("must be true or false")
        return value

    @property
    def exempt_tools(self) -> frozenset[str]:
        return frozenset(t.strip() for t in self.permission_exempt_tools.split(",") if t.strip())

    @field_validator("scale")
    @classmethod
    def _scale_parses(cls, value: str) -> str:
        parse_scale(value)
        return value

    @field_validator("topic_prefix")
    @classmethod
    def _prefix_is_a_resource_name(cls, value: str) -> str:
        # Pub/Sub names start with a letter and hold letters, digits and -_.~+%.
        if not value or not value[0].isalpha() or value.lower().startswith("goog"):
            raise ValueError("must start with a letter and not with 'goog'")
        allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~+%")
        if set(value) - allowed:
            raise ValueError("may hold only letters, digits and - _ . ~ + %")
        return value


_ENV_NAMES = {
    "pubsub_emulator_host": "PUBSUB_EMULATOR_HOST",
    "google_cloud_project": "GOOGLE_CLOUD_PROJECT",
}


def env_name(field: str) -> str:
    """The environment variable that sets a `Settings` field."""
    return _ENV_NAMES.get(field, f"AM_{field.upper()}")


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment; raise `ConfigError` naming the bad variable."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "?"
            problems.append(f"{env_name(field)}: {error['msg'].removeprefix('Value error, ')}")
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
