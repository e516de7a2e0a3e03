"""Fixtures: the real Postgres (pgvector), Valkey and Pub/Sub emulator, started once per
pytest process (each xdist worker has its own) by the same code as `agent-memory up`;
isolation by unique names per test (a topic prefix, user and session ids), never by
wiping shared state."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import valkey
from fastapi.testclient import TestClient
from google.cloud import pubsub_v1
from psycopg_pool import ConnectionPool
from pydantic import SecretStr

from services.api.app import create_app
from services.dev.localstack.emulator import LocalPubSubEmulator, find_emulator
from services.dev.localstack.postgres import LocalPostgres
from services.dev.localstack.process import ManagedProcess, free_port
from services.dev.localstack.valkey_server import LocalValkey
from services.extraction_worker.handlers import Extraction
from shared.bus.admin import TopologyAdmin
from shared.bus.publisher import EventPublisher
from shared.config import Settings, load_settings
from shared.db.migrate import migrate
from shared.embeddings import make_embedder
from shared.llm import OfflineLLM
from shared.llm.gemini import GeminiLLM
from shared.logging import configure_logging
from tests.bus_helpers import inline_extraction
from tests.fake_gemini import FakeGemini
from tests.webhooks import Webhook

TEST_PROJECT = "agent-memory-test"
EMBEDDING_DIM = 768


@dataclass
class Stack:
    database_url: str
    valkey_url: str
    pubsub_host: str
    data_dir: Path
    processes: list[ManagedProcess]


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    configure_logging("console", "WARNING")
    # A SIGTERM (a CI timeout) unwinds like Ctrl-C, so the components below are stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    data_dir = Path(tempfile.mkdtemp(prefix="agent-memory-tests-"))
    logs = data_dir / "logs"
    postgres = LocalPostgres(data_dir, free_port(), logs, fast=True)
    valkey_server = LocalValkey(data_dir, free_port(), logs, fast=True)
    emulator = LocalPubSubEmulator(find_emulator(None), free_port(), logs)
    started: list[ManagedProcess] = []
    saved = os.environ.get("PUBSUB_EMULATOR_HOST")
    try:
        for component in (postgres, valkey_server, emulator):
            started.append(component.process)
            component.start()
        migrate(postgres.url, EMBEDDING_DIM)
        # The Pub/Sub clients built in this process read the emulator address here.
        os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host
        yield Stack(postgres.url, valkey_server.url, emulator.host, data_dir, started)
    finally:
        for proc in reversed(started):
            proc.stop(5)
        if saved is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = saved
        shutil.rmtree(data_dir, ignore_errors=True)


def make_settings(stack: Stack, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "database_url": stack.database_url,
        "valkey_url": stack.valkey_url,
        "pubsub_emulator_host": stack.pubsub_host,
        "google_cloud_project": TEST_PROJECT,
        "topic_prefix": f"t{uuid.uuid4().hex[:8]}-",
        "embedding_dim": EMBEDDING_DIM,
        "retry_min_backoff_seconds": 0,
        "retry_max_backoff_seconds": 1,
        "worker_concurrency": 8,
        "worker_shutdown_seconds": 5.0,
        # A window with fewer turns than it takes closes a second after its last one.
        "extraction_window_seconds": 1.0,
        # Tests of other features call the API as AM_DEFAULT_APP; the tests of
        # authentication turn it on.
        "auth_disabled": True,
    }
    values.update(overrides)
    return load_settings(**values)


@pytest.fixture
def settings(stack: Stack, request: pytest.FixtureRequest) -> Settings:
    """Settings with a topic prefix of this test's own: its topics are its alone.

    A test parametrized indirectly with `pull_mode` runs its workers in that mode."""
    mode = getattr(request, "param", "auto")
    return make_settings(stack, pull_mode=mode)


both_pull_modes = pytest.mark.parametrize("settings", ["unary", "streaming"], indirect=True)


@pytest.fixture
def topology(settings: Settings) -> TopologyAdmin:
    admin = TopologyAdmin(settings)
    admin.apply()
    return admin


@pytest.fixture
def publisher(settings: Settings) -> Iterator[EventPublisher]:
    pub = EventPublisher(settings)
    yield pub
    pub.stop()


@pytest.fixture(scope="session")
def pool(stack: Stack) -> Iterator[ConnectionPool]:
    from shared.db.pool import make_pool

    p = make_pool(make_settings(stack), max_size=8, name="tests")
    yield p
    p.close()


@pytest.fixture(scope="session")
def valkey_client(stack: Stack) -> Iterator[valkey.Valkey]:
    client = valkey.Valkey.from_url(stack.valkey_url)
    yield client
    client.close()


@pytest.fixture
def fresh_database(stack: Stack) -> Iterator[str]:
    """An empty database of its own, for tests of migrations."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    admin_url = stack.database_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield stack.database_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def ids() -> dict[str, str]:
    """Unique identifiers for one test."""
    tag = uuid.uuid4().hex[:8]
    return {"app": f"app-{tag}", "user_id": f"user-{tag}", "session_id": f"sess-{tag}"}


@pytest.fixture
def app_settings(settings: Settings, ids: dict[str, str]) -> Settings:
    """The test's settings with its own app as the API's default tenant."""
    return settings.model_copy(update={"default_app": ids["app"]})


@pytest.fixture
def client(app_settings: Settings, topology: TopologyAdmin) -> Iterator[TestClient]:
    """The read API of the test's app, in process (modules with other needs define
    their own `client`)."""
    with TestClient(create_app(app_settings), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def extraction(app_settings: Settings, pool: ConnectionPool) -> Extraction:
    """The extraction worker's handlers with the `offline` LLM."""
    return inline_extraction(pool, OfflineLLM(), make_embedder(app_settings), app_settings)


@pytest.fixture
def fake() -> Iterator[FakeGemini]:
    """A local fake of the Gemini HTTP API, for the real google-genai client."""
    with FakeGemini() as server:
        yield server


@pytest.fixture
def gemini_llm(fake: FakeGemini) -> GeminiLLM:
    """The `gemini` LLM provider against `fake`, with short retries. Settings of its
    own: no database, Valkey or Pub/Sub here."""
    settings = load_settings(
        llm_provider="gemini",
        gemini_api_key=SecretStr("test-key"),
        gemini_base_url=fake.url,
        llm_retry_initial_seconds=0.01,
        llm_retry_seconds=5.0,
        llm_timeout_seconds=2.0,
    )
    return GeminiLLM(settings)


@pytest.fixture
def webhook(settings: Settings, topology: TopologyAdmin) -> Iterator[Webhook]:
    """memory.changed.v1 as a subscriber receives it."""
    hook = Webhook()
    subscriber = pubsub_v1.SubscriberClient()
    path = topology.subscription_path("memory-changes-hook")
    subscriber.create_subscription(
        request={
            "name": path,
            "topic": topology.topic_path("memory-changes"),
            "push_config": {"push_endpoint": hook.url},
            "enable_message_ordering": True,
        }
    )
    yield hook
    subscriber.delete_subscription(request={"subscription": path})
    subscriber.close()
    hook.close()
