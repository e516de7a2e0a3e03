"""The compaction worker on the real Postgres/pgvector and Pub/Sub emulator (`offline`
LLM, `hash` embeddings): old episodes folded into one summary per scope, the previous
summary kept, continuations past the batch limit, exactly-once effects, tombstones,
project scoping, and `agent-memory compact`."""

import argparse
import json
import threading
import uuid
from concurrent.futures import Future
from datetime import timedelta

import pytest

from services.compaction_worker.handlers import (
    APPLIER,
    SUMMARY_ENTITY,
    Compaction,
    continuation_of,
)
from services.compaction_worker.requests import compaction_request, run_compact_command
from shared.bus.dlq import DeadLetterQueues
from shared.db.episodes import Episode, Episodes
from shared.db.unit_of_work import UnitsOfWork
from shared.embeddings import make_embedder
from shared.errors import PermanentError
from shared.events import CompactionRequested, derived_event_id, encode, format_time, utcnow
from shared.llm import OfflineLLM
from tests.bus_helpers import Recorder, running
from tests.support import WorkerProcess, run_cli, wait_for

OLD = timedelta(days=40)  # older than the 30 days' retention of the requests here
RECENT = timedelta(days=5)


def _compaction(pool, settings, publisher):
    """The compaction worker's handler over the offline provider, publishing with `publisher`."""
    return Compaction(
        UnitsOfWork(pool, "compaction"), OfflineLLM(), make_embedder(settings), settings, publisher
    )


@pytest.fixture
def compaction(settings, topology, publisher, pool):
    return _compaction(pool, settings, publisher)


def no_embeddings(texts):
    """Compaction reads no embedding: the archive's keys stay without one."""
    return [None] * len(texts)


def _add(pool, ids, texts, age=OLD, project="", user_id=None, start=0):
    """Archive one episode per user text, `age` old, one second apart (oldest first)."""
    base = utcnow() - age
    with pool.connection() as conn:
        episodes = Episodes(conn)
        for n, text in enumerate(texts, start):
            episodes.archive_locally(
                Episode(
                    app=ids["app"],
                    user_id=user_id or ids["user_id"],
                    project_id=project,
                    session_id=ids["session_id"],
                    turn_id=f"{project or 'none'}-{age.days}-{n:04d}",
                    event_id=str(uuid.uuid4()),
                    user_text=text,
                    assistant_text="Noted.",
                    tool_events=[],
                    created_at=base + timedelta(seconds=n),
                ),
                no_embeddings,
                neighbours=2,
                dated=True,
            )


def _episodes(pool, ids, user_id=None):
    with pool.connection() as conn:
        return conn.execute(
            "SELECT project_id, user_text FROM episodes WHERE app = %s AND user_id = %s "
            "ORDER BY created_at",
            (ids["app"], user_id or ids["user_id"]),
        ).fetchall()


def _summaries(pool, ids, user_id=None):
    """{project_id: (id, scope, kind, text, has an embedding)} of the live summaries."""
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT project_id, id::text, scope, kind, text, embedding IS NOT NULL "
            "FROM memories WHERE app = %s AND user_id = %s AND entity_name = %s "
            "AND valid_to IS NULL",
            (ids["app"], user_id or ids["user_id"], SUMMARY_ENTITY),
        ).fetchall()
    return {row[0]: row[1:] for row in rows}


def _revisions(pool, memory_id):
    with pool.connection() as conn:
        return conn.execute(
            "SELECT action, old_text, new_text, event_id::text FROM memory_revisions "
            "WHERE memory_id = %s ORDER BY id",
            (memory_id,),
        ).fetchall()


def _state(pool, ids):
    """Everything compaction may change, to compare before and after."""
    with pool.connection() as conn:
        memories = conn.execute(
            "SELECT id, text, observed_at, updated_at FROM memories "
            "WHERE app = %s AND user_id = %s ORDER BY id",
            (ids["app"], ids["user_id"]),
        ).fetchall()
        revisions = conn.execute(
            "SELECT id FROM memory_revisions WHERE app = %s AND user_id = %s ORDER BY id",
            (ids["app"], ids["user_id"]),
        ).fetchall()
    return memories, revisions, _episodes(pool, ids)


def _request(ids, project="", batch_limit=50, user_id=None, **extra):
    return compaction_request(
        ids["app"], user_id or ids["user_id"], project, 30, batch_limit, **extra
    )


def _ledgered(pool, event_id):
    with pool.connection() as conn:
        return conn.execute(
            "SELECT count(*) FROM processed_events WHERE consumer = %s AND event_id = %s",
            (APPLIER, event_id),
        ).fetchone()[0]


# -- one request -------------------------------------------------------------------


def test_old_episodes_are_folded_into_one_summary_and_exactly_those_deleted(compaction, pool, ids):
    _add(
        pool,
        ids,
        ["I prefer Python for scripts.", "Hello there!", "The API timeout must be 30 seconds."],
    )
    _add(pool, ids, ["Never deploy on Fridays.", "We decided to use Go."], age=RECENT)
    event = _request(ids)
    assert compaction.handle_request(event, None) == "applied"

    assert _episodes(pool, ids) == [("", "Never deploy on Fridays."), ("", "We decided to use Go.")]
    [(memory_id, scope, kind, text, embedded)] = _summaries(pool, ids).values()
    assert (scope, kind, embedded) == ("global", "event", True)
    assert text == "User: I prefer Python for scripts. User: The API timeout must be 30 seconds."
    assert _revisions(pool, memory_id) == [("CREATED", None, text, event.event_id)]
    assert _ledgered(pool, event.event_id) == 1


def test_a_second_compaction_keeps_every_fact_of_the_previous_summary(compaction, pool, ids):
    _add(pool, ids, ["I prefer Python for scripts.", "The API timeout must be 30 seconds."])
    first = _request(ids)
    compaction.handle_request(first, None)
    [(memory_id, _, _, first_text, _)] = _summaries(pool, ids).values()

    _add(pool, ids, ["Never deploy on Fridays.", "I prefer Python for scripts."], start=10)
    second = _request(ids)
    assert compaction.handle_request(second, None) == "applied"

    [(same_id, _, _, text, _)] = _summaries(pool, ids).values()
    assert same_id == memory_id
    for sentence in (
        "User: I prefer Python for scripts.",
        "User: The API timeout must be 30 seconds.",
        "User: Never deploy on Fridays.",
    ):
        assert text.count(sentence) == 1, sentence
    assert text.startswith(first_text)
    assert _revisions(pool, memory_id) == [
        ("CREATED", None, first_text, first.event_id),
        ("UPDATED", first_text, text, second.event_id),
    ]
    assert _episodes(pool, ids) == []


def test_a_redelivered_request_changes_nothing(compaction, pool, ids):
    _add(pool, ids, ["I prefer tea.", "The budget is capped at 100 euros."])
    event = _request(ids)
    assert compaction.handle_request(event, None) == "applied"
    before = _state(pool, ids)
    assert compaction.handle_request(event, None) == "duplicate"
    # A delivery that raced past the pre-check meets the ledger inside the transaction.
    compaction._seen = lambda event_id: False
    assert compaction.handle_request(event, None) == "duplicate"
    assert _state(pool, ids) == before
    assert _ledgered(pool, event.event_id) == 1


def test_a_deleted_users_request_compacts_nothing(compaction, pool, ids):
    _add(pool, ids, ["I prefer tea.", "Never deploy on Fridays."])
    made_before = _request(ids, created_at=utcnow() - timedelta(minutes=1))
    with pool.connection() as conn:
        conn.execute(
            "INSERT INTO deleted_users (app, user_id, deleted_at) VALUES (%s, %s, now())",
            (ids["app"], ids["user_id"]),
        )
    assert compaction.handle_request(made_before, None) == "dropped"
    assert len(_episodes(pool, ids)) == 2
    assert _summaries(pool, ids) == {}
    assert _ledgered(pool, made_before.event_id) == 1
    # A request made after the deletion is a new start.
    made_after = _request(ids, created_at=utcnow() + timedelta(seconds=1))
    assert compaction.handle_request(made_after, None) == "applied"
    assert _episodes(pool, ids) == []


def test_a_request_with_a_project_folds_only_that_project_and_one_without_folds_each_into_its_own(
    compaction, pool, ids
):
    _add(pool, ids, ["For Alpha, the region must be us-east1."], project="Alpha")
    _add(pool, ids, ["Beta must use Go."], project="Beta")
    _add(pool, ids, ["I prefer tea."])
    _add(pool, ids, ["Alpha deploys must be reviewed."], project="Alpha", age=RECENT)

    assert compaction.handle_request(_request(ids, project="Alpha"), None) == "applied"
    summaries = _summaries(pool, ids)
    assert {p: s[1:4] for p, s in summaries.items()} == {
        "Alpha": ("project", "event", "User: For Alpha, the region must be us-east1.")
    }
    assert sorted(_episodes(pool, ids)) == [
        ("", "I prefer tea."),
        ("Alpha", "Alpha deploys must be reviewed."),
        ("Beta", "Beta must use Go."),
    ]

    _add(pool, ids, ["Alpha must never use tabs."], project="Alpha", start=5)
    everything = _request(ids)
    assert compaction.handle_request(everything, None) == "applied"
    after = _summaries(pool, ids)
    assert {p: s[1:4] for p, s in after.items()} == {
        "Alpha": (
            "project",
            "event",
            "User: For Alpha, the region must be us-east1. User: Alpha must never use tabs.",
        ),
        "Beta": ("project", "event", "User: Beta must use Go."),
        "": ("global", "event", "User: I prefer tea."),
    }
    assert after["Alpha"][0] == summaries["Alpha"][0]
    assert [r[0] for r in _revisions(pool, after["Alpha"][0])] == ["CREATED", "UPDATED"]
    assert _episodes(pool, ids) == [("Alpha", "Alpha deploys must be reviewed.")]


def test_bad_bounds_are_permanent(compaction, ids):
    for bad in ({"retention_days": 0}, {"batch_limit": 0}):
        event = CompactionRequested(
            **{
                "event_id": str(uuid.uuid4()),
                "app": ids["app"],
                "user_id": ids["user_id"],
                "retention_days": 30,
                "batch_limit": 50,
                "created_at": utcnow(),
                **bad,
            }
        )
        with pytest.raises(PermanentError, match=next(iter(bad))):
            compaction.handle_request(event, None)


# -- through the worker runtime -----------------------------------------------------


def test_120_old_episodes_are_folded_50_at_a_time_until_none_is_left(
    settings, compaction, publisher, pool, ids
):
    statements = [f"Service {i} must answer within {i + 100} ms." for i in range(120)]
    _add(pool, ids, statements)
    _add(pool, ids, ["Never deploy on Fridays."], age=RECENT)
    recorder = Recorder()
    table = {CompactionRequested: recorder.wrap(compaction.handle_request)}
    event = _request(ids, batch_limit=50)
    with running(settings, "compaction-requests", table, publisher):
        publisher.publish(event).result(timeout=10)
        wait_for(lambda: len(_episodes(pool, ids)) == 1, 120, "every old episode folded")
    assert _episodes(pool, ids) == [("", "Never deploy on Fridays.")]
    second = derived_event_id(event.event_id, "continue")
    third = derived_event_id(second, "continue")
    [(memory_id, _, kind, text, _)] = _summaries(pool, ids).values()
    assert kind == "event"
    assert [(r[0], r[3]) for r in _revisions(pool, memory_id)] == [
        ("CREATED", event.event_id),
        ("UPDATED", second),
        ("UPDATED", third),
    ]
    assert text == " ".join(f"User: {s}" for s in statements)
    assert [recorder.outcomes(e) for e in (event.event_id, second, third)] == [["applied"]] * 3


class _FailingOnce:
    """A publisher whose first publish fails (after the commit it follows)."""

    def __init__(self, inner):
        self.inner = inner
        self.failed = False

    def publish(self, event):
        if not self.failed:
            self.failed = True
            future = Future()
            future.set_exception(RuntimeError("injected publish failure"))
            return future
        return self.inner.publish(event)


def test_a_continuation_whose_publish_failed_is_published_by_the_redelivery(
    settings, topology, publisher, pool, ids
):
    _add(pool, ids, ["I prefer tea.", "Never deploy on Fridays.", "We decided to use Go."])
    compaction = _compaction(pool, settings, _FailingOnce(publisher))
    recorder = Recorder()
    table = {CompactionRequested: recorder.wrap(compaction.handle_request)}
    event = _request(ids, batch_limit=2)
    continuation = continuation_of(event)
    with running(settings, "compaction-requests", table, publisher):
        publisher.publish(event).result(timeout=10)
        wait_for(lambda: _episodes(pool, ids) == [], 120, "the last episode folded")
        wait_for(lambda: recorder.outcomes(continuation.event_id), 30, "the continuation")
    first, *rest = recorder.outcomes(event.event_id)
    assert first == "error:injected publish failure"
    assert rest == ["duplicate"]
    assert recorder.outcomes(continuation.event_id) == ["applied"]
    [(memory_id, _, _, text, _)] = _summaries(pool, ids).values()
    assert text == (
        "User: I prefer tea. User: Never deploy on Fridays. User: We decided to use Go."
    )
    assert [r[0] for r in _revisions(pool, memory_id)] == ["CREATED", "UPDATED"]


def test_a_sweep_compacts_each_user_with_old_episodes_once_even_when_redelivered(
    settings, topology, publisher, pool, ids
):
    """A request without a user, as a scheduler publishes it: a fixed body, whose
    created_at lies in the past; the run's time is the message's publish time."""
    second, recent_only = ids["user_id"] + "-b", ids["user_id"] + "-c"
    _add(pool, ids, ["I prefer tea.", "We decided to use Go."])
    _add(pool, ids, ["Never deploy on Fridays."], user_id=second)
    _add(pool, ids, ["I use vim."], age=RECENT, user_id=recent_only)
    # The sweep's first attempt fails on its first publish: the redelivery (same
    # publish time) publishes the same requests again.
    compaction = _compaction(pool, settings, _FailingOnce(publisher))
    recorder = Recorder()
    # The users' requests wait until the redelivered sweep has run: had the second
    # user's first request been applied before, the redelivery would find no old
    # episodes of theirs and rightly publish nothing for them (seen once in CI).
    swept_twice = threading.Event()

    def handle(event, delivery):
        if event.user_id:
            assert swept_twice.wait(30), "the sweep was not redelivered"
            return compaction.handle_request(event, delivery)
        try:
            return compaction.handle_request(event, delivery)
        finally:
            if delivery.delivery_attempt >= 2:
                swept_twice.set()

    table = {CompactionRequested: recorder.wrap(handle)}
    # A sweep (no user), its time fixed in the scheduler's body.
    sweep = compaction_request(
        ids["app"], "", "", 30, 50, created_at=utcnow() - timedelta(days=300)
    )
    with running(settings, "compaction-requests", table, publisher):
        publisher.publish(sweep).result(timeout=10)
        wait_for(
            lambda: _episodes(pool, ids) == [] and _episodes(pool, ids, second) == [],
            60,
            "both users' old episodes folded",
        )
        wait_for(lambda: recorder.count() == 5, 30, "two sweep attempts and three requests")

    first, again = [d for d in recorder.deliveries if d.attributes["event_id"] == sweep.event_id]
    assert first.publish_time == again.publish_time  # the same message, redelivered
    run = format_time(first.publish_time)
    requests = {u: derived_event_id(sweep.event_id, run, u) for u in (ids["user_id"], second)}
    assert recorder.outcomes(sweep.event_id) == ["error:injected publish failure", "applied"]
    # The first user's request failed to publish the first time; the second user's
    # went out both times and was applied once.
    assert recorder.outcomes(requests[ids["user_id"]]) == ["applied"]
    assert recorder.outcomes(requests[second]) == ["applied", "duplicate"]
    for user, texts in ((ids["user_id"], "User: I prefer tea. User: We decided to use Go."),
                        (second, "User: Never deploy on Fridays.")):  # fmt: skip
        [(memory_id, _, _, text, _)] = _summaries(pool, ids, user).values()
        assert text == texts
        assert [(r[0], r[3]) for r in _revisions(pool, memory_id)] == [("CREATED", requests[user])]
    # A user with recent episodes only is not asked.
    assert _episodes(pool, ids, recent_only) == [("", "I use vim.")]
    assert _summaries(pool, ids, recent_only) == {}


def test_a_request_with_bad_bounds_is_dead_lettered(settings, compaction, publisher, ids):
    good = encode(_request(ids))
    record = json.loads(good.data)
    bad = dict(record, retention_days=0, event_id=str(uuid.uuid4()))
    recorder = Recorder()
    table = {CompactionRequested: recorder.wrap(compaction.handle_request)}
    with running(settings, "compaction-requests", table, publisher):
        publisher.publish_raw(
            publisher.topic_path(CompactionRequested.TOPIC),
            json.dumps(bad).encode(),
            dict(good.attributes, event_id=bad["event_id"]),
        ).result(timeout=10)
        queues = DeadLetterQueues(settings)
        [letter] = wait_for(lambda: queues.peek("compaction-requests"), 60, "the dead letter")
    assert letter.event_id == bad["event_id"]
    assert letter.reason == "retention_days: must be at least 1"
    assert recorder.count() == 0


# -- agent-memory compact ------------------------------------------------------------


def _args(**values):
    defaults = {"app": None, "user": None, "project": None, "all": False, "retention_days": None}
    return argparse.Namespace(**{**defaults, **values})


def test_the_compact_command_publishes_requests_the_worker_applies(
    settings, topology, publisher, pool, ids, capsys
):
    local = settings.model_copy(update={"default_app": ids["app"]})
    compaction = _compaction(pool, local, publisher)
    users = {name: f"{ids['user_id']}-{name}" for name in ("a", "b", "c")}
    _add(pool, ids, ["I prefer tea."], user_id=users["a"])
    _add(pool, ids, ["Never deploy on Fridays."], user_id=users["b"], project="Alpha")
    _add(pool, ids, ["I prefer coffee."], user_id=users["c"], age=RECENT)
    table = {CompactionRequested: compaction.handle_request}
    with running(local, "compaction-requests", table, publisher):
        assert run_compact_command(_args(all=True), local) == 0
        out = capsys.readouterr().out.splitlines()
        assert [line.split("  ")[2] for line in out[:-1]] == [
            f"user={users['a']}",
            f"user={users['b']}",
        ]
        assert out[-1] == f"2 compaction request(s) published for app {ids['app']}"
        wait_for(
            lambda: all(_episodes(pool, ids, users[u]) == [] for u in "ab"), 60, "a and b folded"
        )
        assert _summaries(pool, ids, users["b"])["Alpha"][3] == "User: Never deploy on Fridays."
        assert _episodes(pool, ids, users["c"]) == [("", "I prefer coffee.")]

        assert run_compact_command(_args(user=users["c"], retention_days=1), local) == 0
        out = capsys.readouterr().out.splitlines()
        assert len(out) == 2 and out[0].startswith("published ")
        assert f"user={users['c']}  project=(all)  retention_days=1" in out[0]
        wait_for(lambda: _episodes(pool, ids, users["c"]) == [], 60, "c folded")
    assert _summaries(pool, ids, users["c"])[""][3] == "User: I prefer coffee."


def test_the_compact_command_needs_a_user_or_all(settings, capsys):
    assert run_compact_command(_args(), settings) == 2
    assert "--user" in capsys.readouterr().err
    assert run_compact_command(_args(user="u", retention_days=0), settings) == 2
    assert "--retention-days" in capsys.readouterr().err
    finished = run_cli(settings, "compact", "--project", "Alpha")
    assert finished.returncode == 2
    assert "give --user USER (one user) or --all" in finished.stderr


def test_agent_memory_compact_and_the_compaction_worker_as_processes(
    settings, topology, pool, ids, tmp_path
):
    """`agent-memory worker compaction` and `agent-memory compact --user` as a user
    runs them."""
    _add(pool, ids, ["For Alpha, the region must be us-east1."], project="Alpha")
    _add(pool, ids, ["I prefer tea."])
    local = settings.model_copy(update={"default_app": ids["app"]})
    worker = WorkerProcess(local, "compaction", tmp_path / "compaction.log")
    try:
        wait_for(lambda: "worker started" in worker.log_text(), 60, "the worker to start")
        finished = run_cli(local, "compact", "--user", ids["user_id"], "--project", "Alpha")
        assert finished.returncode == 0, finished.stderr
        assert finished.stdout.splitlines()[-1] == (
            f"1 compaction request(s) published for app {ids['app']}"
        )
        wait_for(lambda: "Alpha" in _summaries(pool, ids), 60, "Alpha's summary")
    finally:
        worker.stop()
    assert _episodes(pool, ids) == [("", "I prefer tea.")]
    assert worker.proc.returncode == 0, worker.log_text()
