"""A dependency outage is not the event's fault: the worker holds its messages,
spends none of their delivery attempts, and applies each once when the dependency
is back. Faults are real: a Valkey or PostgreSQL of the test's own is killed with
SIGKILL (or frozen with SIGSTOP) and started again on the same port and data."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import replace
from functools import partial

import httpx
import psutil
import psycopg
import pytest
from prometheus_client import REGISTRY

from services.dev.localstack.postgres import LocalPostgres
from services.dev.localstack.process import free_port
from services.dev.localstack.valkey_server import LocalValkey
from shared.bootstrap import make_valkey
from shared.bus.dependencies import Dependencies, Probe
from shared.bus.dlq import DeadLetter, DeadLetterQueues
from shared.bus.worker import SubscriberRuntime
from shared.db.migrate import migrate
from shared.db.pool import make_pool
from shared.embeddings import make_embedder
from shared.events import TurnRecorded
from shared.llm import OfflineLLM
from shared.metrics import serve_metrics
from shared.probes import check_postgres, drop_broken_connections
from shared.session_buffer import SessionBuffer, SessionKey
from tests.bus_helpers import (
    attempts_spent,
    inline_extraction,
    make_turn,
    summary_handler,
    watched_valkey,
)
from tests.conftest import EMBEDDING_DIM
from tests.support import stays, wait_for

# A burst of retries on the emulator (0-1 s backoff in the tests' settings) would
# spend all five attempts within a few seconds; the outages below last longer.
OUTAGE_SECONDS = 4.0


class Attempts:
    """The delivery attempt of every message a handler was given."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def batch(self, handle):
        def recorded(items):
            self.seen.extend(delivery.delivery_attempt for _event, delivery in items)
            return handle(items)

        return recorded

    def single(self, handle):
        def recorded(event, delivery):
            self.seen.append(delivery.delivery_attempt)
            return handle(event, delivery)

        return recorded


def _runtime(settings, subscription, table, publisher, dependencies) -> SubscriberRuntime:
    runtime = SubscriberRuntime(
        settings, subscription, table, publisher, concurrency=4, dependencies=dependencies
    )
    runtime.start()
    return runtime


def _publish_turns(publisher, ids, numbers: range) -> None:
    for n in numbers:
        publisher.publish(make_turn(ids, n)).result(timeout=10)


def _settled_without_spending(runtime: SubscriberRuntime, subscription: str, spent: int) -> None:
    # Settled, folds included (a stop would hand back what is still queued).
    wait_for(lambda: runtime.in_flight() == 0, 30, "every message settled")
    assert attempts_spent(subscription) == spent


def _each_at_its_first_attempt(settings, attempts: Attempts, subscription: str, turns: int):
    """Every message handled at its first delivery attempt, none dead-lettered."""
    assert set(attempts.seen) == {1} and len(attempts.seen) >= turns
    assert DeadLetterQueues(settings).peek(subscription) == []


def _dead_letter_of_one_turn(settings, runtime: SubscriberRuntime, publisher, ids) -> DeadLetter:
    """Publish one turn and wait for its dead letter; the runtime is stopped after."""
    try:
        publisher.publish(make_turn(ids, 1)).result(timeout=10)
        (letter,) = wait_for(
            lambda: DeadLetterQueues(settings).peek("turns-summary"), 60, "the dead letter"
        )
    finally:
        runtime.stop(timeout=10)
    return letter


@pytest.fixture
def own_valkey(tmp_path) -> Iterator[LocalValkey]:
    server = LocalValkey(tmp_path, free_port(), tmp_path / "logs")  # append-only file on
    server.start()
    yield server
    server.process.stop(5)


@pytest.fixture
def own_postgres(tmp_path) -> Iterator[LocalPostgres]:
    # Durable, as `up` runs it: with synchronous_commit off, a killed server loses
    # the transactions it had not written yet.
    server = LocalPostgres(tmp_path, free_port(), tmp_path / "logs")
    server.start()
    migrate(server.url, EMBEDDING_DIM)
    yield server
    server.process.stop(5)


def _freeze(pid: int, signum: int) -> None:
    """SIGSTOP or SIGCONT a postmaster and its backends (each backend is a session of
    its own, so its process group is the postmaster alone)."""
    parent = psutil.Process(pid)
    for proc in [parent, *parent.children(recursive=True)]:
        # A backend may end between the listing and its signal (its client gone).
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signum)


def test_turns_wait_out_a_valkey_outage_and_are_applied_once_in_order(
    settings, topology, publisher, ids, own_valkey
):
    client = make_valkey(settings.model_copy(update={"valkey_url": own_valkey.url}))
    buffer = SessionBuffer(client, 3600)
    attempts = Attempts()
    real = summary_handler(settings, buffer)
    table = {TurnRecorded: replace(real, first=attempts.batch(real.first))}
    dependencies = watched_valkey(client)
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])

    def applied() -> list[str]:
        view = buffer.read(key, with_folds=True)
        folded = [turn for version in sorted(view.folds) for turn in view.folds[version]]
        return folded + [t.turn_id for t in view.turns]

    spent = attempts_spent("turns-summary")
    runtime = _runtime(settings, "turns-summary", table, publisher, dependencies)
    try:
        _publish_turns(publisher, ids, range(1, 6))
        wait_for(lambda: len(applied()) == 5, 30, "the first five turns")

        own_valkey.process.kill()
        _publish_turns(publisher, ids, range(6, 16))
        wait_for(lambda: "valkey" in dependencies.down(), 30, "the worker to see Valkey down")
        assert _gauge("agent_memory_dependency_up", dependency="valkey") == 0
        stays(lambda: attempts_spent("turns-summary") == spent, OUTAGE_SECONDS, "no attempt spent")

        own_valkey.start()  # the same port and append-only file
        expected = [f"turn-{n:04d}" for n in range(1, 16)]
        wait_for(lambda: applied() == expected, 60, "every turn, once, in order")
        _settled_without_spending(runtime, "turns-summary", spent)
    finally:
        runtime.stop(timeout=10)
        dependencies.close()
        client.close()

    _each_at_its_first_attempt(settings, attempts, "turns-summary", 15)
    assert _gauge("agent_memory_dependency_up", dependency="valkey") == 1


def _gauge(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_extraction_waits_out_postgres_stopped_and_killed_and_archives_each_turn_once(
    settings, topology, publisher, ids, own_postgres
):
    settings = settings.model_copy(update={"database_url": own_postgres.url})
    pool = make_pool(settings, max_size=4, name="outage-test")
    extraction = inline_extraction(pool, OfflineLLM(), make_embedder(settings), settings)
    dependencies = Dependencies(
        {
            "postgres": Probe(
                partial(check_postgres, settings),
                periodic=True,
                recovered=partial(drop_broken_connections, pool),
            )
        },
        retry_min=0.1,
        retry_max=0.5,
        probe_interval=0.3,
    )
    metrics_port = free_port()
    serve_metrics("127.0.0.1", metrics_port, down=dependencies.down)
    readyz = f"http://127.0.0.1:{metrics_port}/readyz"

    def archived() -> list[str]:
        # A connection of its own: the pool's die with the server.
        with psycopg.connect(own_postgres.url) as conn:
            rows = conn.execute(
                "SELECT turn_id FROM episodes WHERE app = %s AND user_id = %s ORDER BY turn_id",
                (ids["app"], ids["user_id"]),
            ).fetchall()
        return [row[0] for row in rows]

    attempts = Attempts()
    table = {TurnRecorded: attempts.single(extraction.handle_turn)}
    spent = attempts_spent("turns-extraction")
    runtime = _runtime(settings, "turns-extraction", table, publisher, dependencies)
    try:
        _publish_turns(publisher, ids, range(1, 6))
        wait_for(lambda: len(archived()) == 5, 30, "the first five turns archived")
        assert httpx.get(readyz, timeout=5).json() == {"status": "ready", "down": []}

        # Frozen: no handler fails, but the probe sees it, and readiness says so.
        _freeze(own_postgres.process.pid, signal.SIGSTOP)
        try:
            _publish_turns(publisher, ids, range(6, 11))
            not_ready = wait_for(
                lambda: (r := httpx.get(readyz, timeout=5)).status_code == 503 and r,
                30,
                "the worker to report Postgres down",
            )
            body = not_ready.json()
            assert (body["status"], body["down"]) == ("unavailable", ["postgres"])
            # A new connection times out; a probe caught mid-statement is given up.
            assert body["reasons"]["postgres"] in ("ConnectionTimeout", "TimeoutError")
        finally:
            _freeze(own_postgres.process.pid, signal.SIGCONT)
        wait_for(lambda: len(archived()) == 10, 60, "the turns held while it was frozen")

        # Killed: the handlers fail on dead connections, and hold their messages.
        os.kill(own_postgres.process.pid, signal.SIGKILL)
        _publish_turns(publisher, ids, range(11, 21))
        wait_for(lambda: "postgres" in dependencies.down(), 30, "Postgres seen down")
        stays(
            lambda: attempts_spent("turns-extraction") == spent, OUTAGE_SECONDS, "no attempt spent"
        )
        own_postgres.process.wait(5)
        wait_for(_started(own_postgres), 60, "PostgreSQL to start again")
        expected = [f"turn-{n:04d}" for n in range(1, 21)]
        wait_for(lambda: archived() == expected, 60, "every turn archived once")
        assert httpx.get(readyz, timeout=5).status_code == 200
        _settled_without_spending(runtime, "turns-extraction", spent)
    finally:
        runtime.stop(timeout=10)
        dependencies.close()
        pool.close()

    _each_at_its_first_attempt(settings, attempts, "turns-extraction", 20)


def _started(server: LocalPostgres):
    """A start of `server` that is retried: its killed backends may hold its shared
    memory for a moment after the postmaster is gone."""

    def attempt() -> bool:
        try:
            server.start()
        except Exception:  # started too soon; the next poll tries again
            server.process.stop(2)
            return False
        return True

    return attempt


def test_an_events_own_failures_are_retried_after_the_subscriptions_backoff(
    settings, topology, publisher, ids
):
    # The emulator redelivers a nacked message at once; the worker waits the
    # retry policy's backoff (1, 2, 2, 2 s here) before it nacks.
    settings = settings.model_copy(
        update={"retry_min_backoff_seconds": 1, "retry_max_backoff_seconds": 2}
    )
    calls: list[float] = []

    def broken(event, delivery):
        calls.append(time.monotonic())
        raise RuntimeError("this event breaks the handler")

    runtime = _runtime(settings, "turns-summary", {TurnRecorded: broken}, publisher, Dependencies())
    letter = _dead_letter_of_one_turn(settings, runtime, publisher, ids)
    assert letter.reason == (
        "failed 5 attempts; last error RuntimeError: this event breaks the handler"
    )
    gaps = [later - earlier for earlier, later in zip(calls, calls[1:], strict=False)]
    assert len(gaps) == 4
    for gap, backoff in zip(gaps, [1, 2, 2, 2], strict=True):
        assert backoff <= gap < backoff + 2, gaps


def test_a_message_that_fails_on_a_dependency_which_answers_its_probe_is_dead_lettered(
    settings, topology, publisher, ids
):
    from shared.errors import DependencyError

    calls = []

    def always_times_out(event, delivery):
        calls.append(delivery.delivery_attempt)
        raise DependencyError("llm", "the model timed out on this prompt")

    dependencies = Dependencies({"llm": Probe(lambda: None)}, retry_min=0.05, retry_max=0.1)
    runtime = _runtime(
        settings, "turns-summary", {TurnRecorded: always_times_out}, publisher, dependencies
    )
    try:
        letter = _dead_letter_of_one_turn(settings, runtime, publisher, ids)
    finally:
        dependencies.close()
    assert letter.reason == (
        "failed 5 attempts; last error failed on llm 4 times although it answered its probe; "
        "DependencyError: the model timed out on this prompt"
    )
    # Held three times after the probe passed, then each further failure is the
    # event's: one attempt each until the fifth.
    assert calls == [1, 1, 1, 1, 1, 2, 3, 4, 5]


def test_record_turn_answers_within_its_timeout_while_postgres_is_frozen(
    stack, app_settings, topology, pool, ids
):
    from shared.api_keys import create_key
    from tests.support import serve_api

    settings = app_settings.model_copy(
        update={
            "auth_disabled": False,
            "auth_cache_seconds": 0,  # every request looks its key up
            "auth_lookup_timeout_seconds": 1.0,
        }
    )
    with pool.connection() as conn:
        known, _ = create_key(conn, ids["app"])
        unknown, _ = create_key(conn, ids["app"])  # valid, but never used before the freeze
        conn.commit()
    postgres = next(p for p in stack.processes if p.name == "postgres")

    def record(key: str, n: int) -> tuple[int, float]:
        started = time.monotonic()
        answer = httpx.post(
            f"{url}/v1/sessions/{ids['session_id']}/turns",
            json={"user_id": ids["user_id"], "user": f"turn {n}", "assistant": "ok"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        return answer.status_code, time.monotonic() - started

    with serve_api(settings) as url:
        assert record(known, 1)[0] == 202
        _freeze(postgres.pid, signal.SIGSTOP)
        try:
            stale, stale_took = record(known, 2)
            refused, refused_took = record(unknown, 3)
        finally:
            _freeze(postgres.pid, signal.SIGCONT)
    # The key verified before the freeze is still trusted; the other cannot be checked.
    assert stale == 202 and stale_took < 3.0, (stale, stale_took)
    assert refused == 503 and refused_took < 3.0, (refused, refused_took)
