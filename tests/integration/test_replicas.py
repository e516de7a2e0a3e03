"""Two replicas of every worker kind (`agent-memory worker KIND` processes) consume the
same subscriptions at once, against the real Postgres, Valkey and Pub/Sub emulator.

One burst per test: 240 turns of one user in six sessions, each turn restating the
same memory ("My favourite number is N."), and compaction requests for three other
users with 40 old episodes each (two requests per user, each published twice).
Whichever replica handles what, each turn is buffered and archived exactly once and
in order, the folds of a session take its oldest turns in order and each turn once,
the user's memory revisions are serialised (no lost update), and compaction folds
each old episode once. The second test kills one replica of each kind with SIGKILL
in the middle of the backlog (publishing a wave of new sessions or compaction users
if a victim has had none yet) and does not restart it: the survivors, with Pub/Sub's
redelivery of what the dead replicas held, finish the work."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from services.compaction_worker.handlers import continuation_of
from services.dev.localstack.process import free_port
from services.extraction_worker.handlers import TURNS_SUBSCRIPTION
from shared.bus.admin import TopologyAdmin
from shared.bus.dlq import DeadLetterQueues
from shared.bus.topology import SUBSCRIPTIONS
from shared.events import CompactionRequested, TurnRecorded
from shared.session_buffer import SessionBuffer, SessionKey
from tests.bus_helpers import make_turn
from tests.integration.test_compaction import _add, _episodes, _request, _revisions, _summaries
from tests.support import WorkerProcess, wait_for

KINDS = ("summary", "extraction", "compaction")
TURN_KINDS = ("summary", "extraction")
SESSIONS = 6
TURNS = SESSIONS * 40
TRIGGER_TURNS = 6  # a session's buffer folds when it holds more turns than this,
KEPT_TURNS = 2  # all of them but the newest two
COMPACTION_USERS = 3
OLD_EPISODES = 40
BATCH = 5  # episodes per compaction fold
WAVE = SESSIONS * 10  # more turns in new sessions, for a victim that has had none
MAX_WAVES = 20  # a victim that has had nothing of so many is starved: the test fails
WAVE_SECONDS = 0.5  # how long a wave's turns take to publish
COMPACTIONS = OLD_EPISODES // BATCH  # compactions per user, whoever makes them


@pytest.fixture
def local(settings):
    """The test's settings with early folds (the two summary replicas race on the
    folds of every session) and the shortest ack deadline (what a killed replica
    pulled but had not leased yet comes back as soon as what it had leased)."""
    local = settings.model_copy(
        update={
            "summary_trigger_turns": TRIGGER_TURNS,
            "summary_kept_turns": KEPT_TURNS,
            "ack_deadline_seconds": 10,
        }
    )
    TopologyAdmin(local).apply()
    return local


@dataclass
class Burst:
    ids: dict[str, str]
    sessions: list[dict[str, str]] = field(init=False)
    turns: list[TurnRecorded] = field(init=False)
    number: dict[str, int] = field(init=False)  # event_id -> the number the turn states
    statements: dict[str, list[str]] = field(init=False)  # compaction user -> old episodes
    requests: list[CompactionRequested] = field(init=False)

    def __post_init__(self) -> None:
        self.publishing: list[threading.Thread] = []  # waves still being published
        self.sessions, self.turns, self.number = [], [], {}
        self.statements, self.requests = {}, []
        self.add_turns(TURNS)
        for _ in range(COMPACTION_USERS):
            self.add_compaction_user()

    def add_turns(self, count: int) -> list[TurnRecorded]:
        """`count` more turns in SESSIONS new sessions: new ordering keys, which a
        replica holding the others' keys does not already have."""
        sessions = [
            dict(self.ids, session_id=f"{self.ids['session_id']}-{len(self.sessions) + s}")
            for s in range(SESSIONS)
        ]
        self.sessions += sessions
        # n is unique across the sessions: every turn has a created_at and a value of
        # its own, so the newest statement of the memory is well defined.
        numbers = range(len(self.turns) + 1, len(self.turns) + count + 1)
        new = [
            make_turn(sessions[n % SESSIONS], n, user=f"My favourite number is {n}.")
            for n in numbers
        ]
        self.turns += new
        self.number.update((t.event_id, n) for t, n in zip(new, numbers, strict=True))
        return new

    def add_compaction_user(self) -> tuple[str, list[CompactionRequested]]:
        """A user with OLD_EPISODES statements to archive and two requests to compact
        them: two chains of continuations race on the same episodes."""
        u = len(self.statements)
        user = f"{self.ids['user_id']}-c{u}"
        self.statements[user] = [
            f"Service {u}.{i} must answer within {i + 100} ms." for i in range(OLD_EPISODES)
        ]
        requests = [_request(self.ids, user_id=user, batch_limit=BATCH) for _ in (1, 2)]
        self.requests += requests
        return user, requests

    def key(self, session: dict[str, str]) -> SessionKey:
        return SessionKey(session["app"], session["user_id"], session["session_id"])

    def turn_ids(self, session: dict[str, str]) -> list[str]:
        return [t.turn_id for t in self.turns if t.session_id == session["session_id"]]

    def user_ids(self, user: str) -> dict[str, str]:
        return dict(self.ids, user_id=user)

    def chain(self, user: str) -> set[str]:
        """Every event id the requests of `user` and their continuations can have (a
        chain compacts at most COMPACTIONS batches, then one more link may find nothing)."""
        ids = set()
        for request in (r for r in self.requests if r.user_id == user):
            for _ in range(COMPACTIONS + 1):
                ids.add(request.event_id)
                request = continuation_of(request)
        return ids

    def totals(self) -> dict[str, int]:
        return {
            "summary": len(self.turns),
            "extraction": len(self.turns),
            "compaction": len(self.statements) * COMPACTIONS,
        }


class Replicas:
    """Two `agent-memory worker KIND` processes of every kind, each serving its metrics."""

    def __init__(self, settings, tmp_path, app: str) -> None:
        self.app = app
        self.ports: dict[int, int] = {}  # a worker's pid -> its metrics port
        self.workers: dict[str, list[WorkerProcess]] = {kind: [] for kind in KINDS}
        try:
            for kind in KINDS:
                self.workers[kind] = [self._start(settings, kind, tmp_path, r) for r in (1, 2)]
            for worker in self.all():
                wait_for(lambda w=worker: "worker started" in w.log_text(), 60, f"{worker.kind} up")
        except BaseException:
            self.stop()  # none left running into the next test
            raise

    def _start(self, settings, kind: str, tmp_path, replica: int) -> WorkerProcess:
        port = free_port()
        worker = WorkerProcess(
            settings, kind, tmp_path / f"{kind}-{replica}.log", AM_METRICS_PORT=str(port)
        )
        self.ports[worker.proc.pid] = port
        return worker

    def all(self) -> list[WorkerProcess]:
        return [w for pair in self.workers.values() for w in pair]

    def in_flight(self, worker: WorkerProcess) -> float:
        """The messages `worker` holds leased and has not settled (its metric)."""
        port = self.ports[worker.proc.pid]
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "agent_memory_messages_in_flight"
            for sample in family.samples
        )

    def handled(self, worker: WorkerProcess) -> list[dict]:
        """The worker's log line of each message of this test it settled."""
        return [
            r
            for r in worker.log_records()
            if r.get("message") == "message handled" and r.get("app") == self.app
        ]

    def outcomes(self, kind: str, subscription: str) -> Counter:
        handled = [r for w in self.workers[kind] for r in self.handled(w)]
        return Counter(r["outcome"] for r in handled if r["subscription"] == subscription)

    def taken_over(self, worker: WorkerProcess) -> int:
        """Messages `worker` settled on a later delivery attempt without having had
        the earlier one: another replica's, redelivered."""
        handled = self.handled(worker)
        own = {r["message_id"] for r in handled if r["delivery_attempt"] == 1}
        return sum(r["delivery_attempt"] > 1 and r["message_id"] not in own for r in handled)

    def logged(self, kind: str, message: str) -> list[dict]:
        return [
            r for w in self.workers[kind] for r in w.log_records() if r.get("message") == message
        ]

    def stop(self) -> None:
        # SIGTERM to all at once (each takes up to a pull's timeout to stop), and only
        # once: a second one may reach an exiting process whose default handler is back.
        running = [w for w in self.all() if w.proc.poll() is None]
        for worker in running:
            worker.signal(signal.SIGTERM)
        for worker in running:
            worker.wait(timeout=30)
        for worker in self.all():
            worker.stop()  # closes its log


def _publish_requests(publisher, requests: list[CompactionRequested]) -> None:
    for request in requests:
        # Twice: both replicas may hold the same event at once.
        publisher.publish(request)
        publisher.publish(request)


def _publish(publisher, burst: Burst) -> None:
    _publish_requests(publisher, burst.requests)
    for turn in burst.turns:
        publisher.publish(turn)


def _paced(publisher, turns: list[TurnRecorded]) -> None:
    for turn in turns:
        publisher.publish(turn)
        time.sleep(WAVE_SECONDS / len(turns))  # noqa: sleep-ok - paces the wave


def _wave(burst: Burst, publisher, pool, kinds: list[str], waves: Counter) -> None:
    """New work for the replicas of `kinds`, counted in `waves`: turns in new
    sessions (both turn kinds get them), or a new compaction user."""
    waves.update(kinds)
    if any(kind in TURN_KINDS for kind in kinds):
        # Paced, beside the test's looks: the summary replicas buffer a turn in a
        # millisecond, and a wave published at once was drained between two looks
        # in all of 20 waves.
        paced = threading.Thread(target=_paced, args=(publisher, burst.add_turns(WAVE)))
        paced.start()
        burst.publishing.append(paced)
    if "compaction" in kinds:
        user, requests = burst.add_compaction_user()
        _add(pool, burst.user_ids(user), burst.statements[user])
        _publish_requests(publisher, requests)


def _progress(burst: Burst, pool, buffer: SessionBuffer) -> dict[str, int]:
    """Turns buffered, turns extracted (their windows done), compaction folds committed."""
    with pool.connection() as conn:
        extracted, folds = conn.execute(
            "SELECT (SELECT count(*) FROM processed_events WHERE consumer = %(t)s "
            "AND event_id = ANY(%(e)s::uuid[])), "
            "(SELECT count(*) FROM memory_revisions WHERE app = %(a)s AND user_id = ANY(%(c)s))",
            {"t": TURNS_SUBSCRIPTION, "e": [t.event_id for t in burst.turns]}
            | {"a": burst.ids["app"], "c": list(burst.statements)},
        ).fetchone()
    buffered = sum(buffer.read(burst.key(s)).turns_total for s in burst.sessions)
    return {"summary": buffered, "extraction": extracted, "compaction": folds}


def _settled(burst: Burst, pool, buffer: SessionBuffer) -> bool:
    """Everything applied, and no session left over its fold trigger."""
    return _progress(burst, pool, buffer) == burst.totals() and all(
        len(buffer.read(burst.key(s)).turns) <= TRIGGER_TURNS for s in burst.sessions
    )


def _check_buffers(burst: Burst, buffer: SessionBuffer) -> None:
    for session in burst.sessions:
        view = buffer.read(burst.key(session), with_folds=True)
        expected = burst.turn_ids(session)
        assert view.turns_total == len(expected)  # each turn_id appended once
        # Versions 1..n, each stored once. In version order, the folds and then the
        # buffer are the session's turns in created_at order: each fold took the
        # oldest turns left, no turn is in two folds or twice in one, none is lost.
        assert list(view.folds) == list(range(1, view.summary.version + 1))
        placed = [turn_id for version in view.folds for turn_id in view.folds[version]]
        placed += [t.turn_id for t in view.turns]
        assert placed == expected, session["session_id"]
        assert [t.created_at for t in view.turns] == sorted(t.created_at for t in view.turns)
        assert KEPT_TURNS <= len(view.turns) <= TRIGGER_TURNS


def _check_archive(burst: Burst, pool) -> None:
    with pool.connection() as conn:
        archived = conn.execute(
            "SELECT session_id, turn_id, event_id::text FROM episodes "
            "WHERE app = %s AND user_id = %s ORDER BY created_at",
            (burst.ids["app"], burst.ids["user_id"]),
        ).fetchall()
        ledgered = conn.execute(
            "SELECT count(*) FROM processed_events WHERE consumer = %s AND event_id = ANY(%s)",
            (TURNS_SUBSCRIPTION, [t.event_id for t in burst.turns]),
        ).fetchone()[0]
    assert archived == [(t.session_id, t.turn_id, t.event_id) for t in burst.turns]
    assert ledgered == len(burst.turns)


def _check_memory(burst: Burst, pool) -> None:
    """One memory, one revision per turn, each revision made on the state the one
    before it left: a lost update would show an old_text that is not the latest."""
    with pool.connection() as conn:
        [(memory_id, text, observed_at, valid_to)] = conn.execute(
            "SELECT id::text, text, observed_at, valid_to FROM memories "
            "WHERE app = %s AND user_id = %s",
            (burst.ids["app"], burst.ids["user_id"]),
        ).fetchall()
        revisions = conn.execute(
            "SELECT action, old_text, new_text, event_id::text, observed_at, applied "
            "FROM memory_revisions WHERE memory_id = %s ORDER BY id",
            (memory_id,),
        ).fetchall()
    newest = max(burst.turns, key=lambda t: t.created_at)
    assert (text, observed_at, valid_to) == (
        f"User's favourite number is {burst.number[newest.event_id]}.",
        newest.created_at,
        None,
    )
    assert sorted(r[3] for r in revisions) == sorted(t.event_id for t in burst.turns)
    latest_text: str | None = None
    latest_at: datetime | None = None
    for action, old_text, new_text, event_id, seen_at, applied in revisions:
        assert new_text == f"User's favourite number is {burst.number[event_id]}."
        assert old_text == latest_text, (action, event_id)
        if applied:
            assert action == ("CREATED" if latest_text is None else "UPDATED")
            assert latest_at is None or seen_at > latest_at
            latest_text, latest_at = new_text, seen_at
        else:
            # Observed before what the memory already held: history only.
            assert latest_at is not None and action == "UPDATED" and seen_at < latest_at
    assert (latest_text, latest_at) == (text, observed_at)


def _check_compaction(burst: Burst, pool) -> None:
    for user, statements in burst.statements.items():
        ids = burst.user_ids(user)
        assert _episodes(pool, ids) == []
        [(memory_id, scope, kind, text, embedded)] = _summaries(pool, ids).values()
        assert (scope, kind, embedded) == ("global", "event", True)
        # Each old episode folded once, oldest first.
        assert text == " ".join(f"User: {s}" for s in statements)
        revisions = _revisions(pool, memory_id)
        assert [r[0] for r in revisions] == ["CREATED"] + ["UPDATED"] * (COMPACTIONS - 1)
        # Each fold built on the summary the one before it stored, each by its own request.
        assert [r[1] for r in revisions] == [None] + [r[2] for r in revisions[:-1]]
        assert len({r[3] for r in revisions}) == COMPACTIONS
        assert {r[3] for r in revisions} <= burst.chain(user)


def _check_everything(burst: Burst, pool, buffer: SessionBuffer, settings) -> None:
    _check_buffers(burst, buffer)
    _check_archive(burst, pool)
    _check_memory(burst, pool)
    _check_compaction(burst, pool)
    queues = DeadLetterQueues(settings)
    for spec in SUBSCRIPTIONS:
        assert queues.peek(spec.name) == [], spec.name


def _start(settings, pool, valkey_client, ids, tmp_path):
    """The burst's old episodes written, and two replicas of every kind running."""
    burst = Burst(ids)
    for user, statements in burst.statements.items():
        _add(pool, burst.user_ids(user), statements)
    return burst, SessionBuffer(valkey_client, 3600), Replicas(settings, tmp_path, ids["app"])


def test_two_replicas_of_each_kind_apply_every_event_exactly_once(
    local, publisher, pool, valkey_client, ids, tmp_path
):
    burst, buffer, replicas = _start(local, pool, valkey_client, ids, tmp_path)
    waves: Counter = Counter()  # kind -> waves published for a replica that had nothing

    def applied_by_both() -> bool:
        # A busy replica pulls again at once and may take a whole burst's ordering
        # keys while the other pauses between empty pulls: when all is applied and a
        # replica of a kind has had nothing, a wave of new work follows (turns in
        # new sessions, or a new compaction user), up to MAX_WAVES.
        if not _settled(burst, pool, buffer):
            return False
        idle = [
            kind for kind, pair in replicas.workers.items() if not all(map(replicas.handled, pair))
        ]
        assert max(waves.values(), default=0) < MAX_WAVES, f"a replica had nothing: {waves}"
        _wave(burst, publisher, pool, idle, waves)
        return not idle

    try:
        _publish(publisher, burst)
        wait_for(applied_by_both, 90, "the burst applied by both replicas", interval=0.2)
    finally:
        for paced in burst.publishing:
            paced.join(timeout=30)
        replicas.stop()
    assert [w.proc.returncode for w in replicas.all()] == [0] * 6
    _check_everything(burst, pool, buffer, local)

    # Each turn applied by one replica (the others' deliveries of it, if any, were
    # duplicates): nothing died, so every effect was logged.
    assert replicas.outcomes("summary", "turns-summary")["applied"] == len(burst.turns)
    # (The extraction worker's other acks are its windows' extraction requests.)
    assert replicas.outcomes("extraction", TURNS_SUBSCRIPTION)["applied"] == len(burst.turns)
    # Each summary version stored by one replica, as Valkey recorded it.
    logged = Counter(
        (r["session"], r["version"], r["turns"])
        for r in replicas.logged("summary", "summary folded")
        if r["session"].startswith(ids["session_id"])
    )
    stored = Counter(
        (s["session_id"], version, len(turns))
        for s in burst.sessions
        for version, turns in buffer.read(burst.key(s), with_folds=True).folds.items()
    )
    assert logged == stored
    # Each compaction batch committed once: per user 8 batches of 5 (a last request
    # of a chain that finds nothing left commits 0 episodes).
    compacted = Counter(
        (r["user_id"], r["compacted"])
        for r in replicas.logged("compaction", "episodes compacted")
        if r["user_id"] in burst.statements and r["compacted"]
    )
    assert compacted == {(user, BATCH): COMPACTIONS for user in burst.statements}


@pytest.mark.slow
def test_the_survivors_finish_exactly_once_when_one_replica_of_each_kind_is_killed(
    local, publisher, pool, valkey_client, ids, tmp_path
):
    burst, buffer, replicas = _start(local, pool, valkey_client, ids, tmp_path)
    victims = {kind: pair[0] for kind, pair in replicas.workers.items()}
    survivors = [pair[1] for pair in replicas.workers.values()]
    left_at_kill: dict[str, int] = {}  # kind -> its work not done just before the kill
    held_at_kill: dict[str, float] = {}  # kind -> the messages its victim held unsettled
    waves: Counter = Counter()  # kind -> waves published for its victim

    def kill_busy_victims() -> bool:
        # A victim dies once it has settled messages of this test and its kind's
        # work is not done: it is in the middle of the backlog. The extraction and
        # compaction victims must also hold messages they have not settled (a summary
        # victim drains its turns in milliseconds and is seldom seen holding any).
        # The progress is read again just before the kill: the checks take time, in
        # which the other replica works on.
        now, totals = _progress(burst, pool, buffer), burst.totals()

        def midway(kind: str, progress: dict[str, int]) -> bool:
            return progress[kind] < totals[kind]

        for kind, victim in victims.items():
            if kind in left_at_kill or not midway(kind, now) or not replicas.handled(victim):
                continue
            held = replicas.in_flight(victim)
            progress = _progress(burst, pool, buffer)
            if (held or kind == "summary") and midway(kind, progress):
                victim.signal(signal.SIGKILL)
                held_at_kill[kind] = held
                left_at_kill[kind] = totals[kind] - progress[kind]
        # The sessions are the turns' ordering keys, and the other replica may hold all
        # six until the backlog runs dry; the other compaction replica may take every
        # request. A victim still alive when its kind's work is almost done gets a
        # wave of new work: turns in new sessions, or a new compaction user.
        left = {kind: totals[kind] - now[kind] for kind in KINDS}
        assert max(waves.values(), default=0) < MAX_WAVES, f"killed: {left_at_kill}, {waves}"
        starved = [k for k in TURN_KINDS if k not in left_at_kill]
        if not any(left[k] < WAVE // 4 for k in starved):
            starved = []
        if "compaction" not in left_at_kill and left["compaction"] < COMPACTIONS // 4:
            starved.append("compaction")
        _wave(burst, publisher, pool, starved, waves)
        return len(left_at_kill) == len(KINDS)

    try:
        _publish(publisher, burst)
        try:
            wait_for(kill_busy_victims, 90, "each victim busy", interval=0.02)
        except TimeoutError as timeout:
            raise AssertionError(f"killed: {left_at_kill}, waves: {dict(waves)}") from timeout
        assert [v.wait(timeout=10) for v in victims.values()] == [-signal.SIGKILL] * 3
        # A fold lock the dead summary replica held delays its session's fold until
        # the lock runs out (10 s); the survivor looks at the session again then.
        wait_for(lambda: _settled(burst, pool, buffer), 60, "the backlog", interval=0.2)

        # What a dead replica held comes back when its lease ends, and the survivor
        # handles it: applied then, or found done (killed after its commit, before
        # its ack, the effect may be in the figures already).
        def taken_over() -> dict[str, int]:
            return {kind: replicas.taken_over(pair[1]) for kind, pair in replicas.workers.items()}

        try:
            wait_for(
                lambda: all(taken_over()[k] for k in KINDS if held_at_kill[k]),
                60,
                "the dead replicas' messages taken over",
                interval=0.2,
            )
        except TimeoutError as timeout:
            raise AssertionError(f"held: {held_at_kill}, taken over: {taken_over()}") from timeout
    finally:
        for paced in burst.publishing:
            paced.join(timeout=30)
        replicas.stop()
    assert [w.proc.returncode for w in survivors] == [0] * 3
    _check_everything(burst, pool, buffer, local)
