"""Handlers of the compaction worker: a user's old episodes folded into long-term
summaries (docs/design.md, "Compaction").

For `compaction.requested.v1`: the user's episodes older than the event's
`created_at` minus `retention_days` (the event's time, not the clock's, so a
redelivery or a continuation selects against the same cut-off), oldest first, at
most `batch_limit`, only the request's project if it names one. The episodes of
each project (no project: the global scope) are folded, with that scope's previous
compacted summary, into one `event` memory of entity `compacted-episodes` — by the
LLM, outside any transaction. Then in ONE transaction holding the user's advisory
lock: the ledger row, each summary (a CREATED or UPDATED revision with the event's
id), and the deletion of exactly the episodes folded. If, under the lock, the batch
or a previous summary is no longer what was folded (a concurrent writer), nothing
is written and the fold is done again.

More old episodes left: a continuation request is published after the commit,
with the same cut-off and an event_id derived from this one's, so publishing it
twice is harmless. A failed publish raises (the message is redelivered); the
redelivery finds the ledger row and publishes the continuation again while old
episodes remain. Every request folds at least one episode when any remain, so a
chain of continuations ends.

A user deleted (table `deleted_users`) after the request was made: the request is
ledgered, nothing is compacted and nothing continues.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import structlog
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from shared.bootstrap import Resources
from shared.bus.publisher import EventPublisher
from shared.bus.worker import Delivery, HandlerTable, Outcome
from shared.config import Settings
from shared.db.pool import UnitOfWork
from shared.db.repositories import ProcessedEvents
from shared.errors import PermanentError
from shared.events import CompactionRequested, derived_event_id, format_time
from shared.llm.base import DialogueTurn
from shared.memory.deletion import is_tombstoned
from shared.memory.store import COMPACTED_ENTITY, MemoryRow, MemoryStore, NewMemory, user_lock

log = structlog.get_logger("agent_memory.compaction")

CONSUMER = "compaction"
SUMMARY_ENTITY = COMPACTED_ENTITY
# Folds redone when a concurrent writer changed the batch; then the message is retried.
_FOLD_ATTEMPTS = 3
_EARLIEST = datetime.min.replace(tzinfo=UTC)


class BatchChanged(RuntimeError):
    """The batch kept changing under the fold (transient: the message is retried)."""


@dataclass(frozen=True)
class OldEpisode:
    id: str
    project_id: str
    session_id: str
    turn_id: str
    user_text: str
    assistant_text: str
    created_at: datetime

    def as_turn(self) -> DialogueTurn:
        return DialogueTurn(
            f"{self.session_id}/{self.turn_id}",
            self.created_at,
            self.user_text,
            self.assistant_text,
        )


@dataclass(frozen=True)
class Fold:
    """One scope's share of a batch: its episodes and the summary they fold into."""

    key: NewMemory  # the summary memory as it will be written (text, embedding)
    episodes: list[OldEpisode]
    previous: MemoryRow | None


def cutoff(created_at: datetime, retention_days: int) -> datetime:
    """Episodes created before this are old. A retention reaching before the calendar
    begins leaves nothing old."""
    try:
        return created_at - timedelta(days=retention_days)
    except OverflowError:
        return _EARLIEST


def cutoff_of(event: CompactionRequested) -> datetime:
    return cutoff(event.created_at, event.retention_days)


def users_with_old_episodes(
    conn: psycopg.Connection, app: str, cutoff: datetime, project_id: str = ""
) -> list[str]:
    """The users of `app` with episodes created before `cutoff` (of `project_id`
    only, when not ""), in order."""
    project = "AND project_id = %(project)s " if project_id else ""
    rows = conn.execute(
        "SELECT DISTINCT user_id FROM episodes WHERE app = %(app)s "
        f"AND created_at < %(cutoff)s {project}ORDER BY user_id",
        {"app": app, "cutoff": cutoff, "project": project_id},
    ).fetchall()
    return [row[0] for row in rows]


def check_request(event: CompactionRequested) -> None:
    """The bounds the codec checks on receipt, checked again for direct callers."""
    if event.retention_days < 1:
        raise PermanentError(f"retention_days is {event.retention_days}; must be at least 1")
    if event.batch_limit < 1:
        raise PermanentError(f"batch_limit is {event.batch_limit}; must be at least 1")


def continuation_of(event: CompactionRequested) -> CompactionRequested:
    """The request that goes on where `event` stopped: same user, project, cut-off and
    batch size; its id derived from the parent's, so a second publish is a duplicate."""
    return replace(event, event_id=derived_event_id(event.event_id, "continue"))


def _summary_key(event: CompactionRequested, project_id: str) -> NewMemory:
    return NewMemory(
        app=event.app,
        user_id=event.user_id,
        project_id=project_id,
        session_id="",
        scope="project" if project_id else "global",
        kind="event",
        entity_name=SUMMARY_ENTITY,
        text="",
        embedding=None,
        observed_at=event.created_at,
    )


# -- reads (each on the caller's connection) ---------------------------------------
def _old_episodes(
    conn: psycopg.Connection, event: CompactionRequested, old_before: datetime, limit: int
) -> list[OldEpisode]:
    project = "AND project_id = %(project)s " if event.project_id else ""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT id::text AS id, project_id, session_id, turn_id, user_text, "
            "assistant_text, created_at FROM episodes "
            "WHERE app = %(app)s AND user_id = %(user_id)s AND created_at < %(cutoff)s "
            f"{project}ORDER BY created_at, id LIMIT %(limit)s",
            {
                "app": event.app,
                "user_id": event.user_id,
                "project": event.project_id,
                "cutoff": old_before,
                "limit": limit,
            },
        ).fetchall()
    return [OldEpisode(**row) for row in rows]


def _tombstoned(conn: psycopg.Connection, event: CompactionRequested) -> bool:
    """Was the user deleted (GDPR) after this request was made?"""
    return is_tombstoned(conn, event.app, event.user_id, event.created_at)


def _by_project(episodes: list[OldEpisode]) -> dict[str, list[OldEpisode]]:
    groups: dict[str, list[OldEpisode]] = {}
    for episode in episodes:
        groups.setdefault(episode.project_id, []).append(episode)
    return groups


@dataclass
class Compaction:
    pool: ConnectionPool
    llm: Any
    embedder: Any
    settings: Settings
    publisher: EventPublisher

    def handle_request(self, event: CompactionRequested, delivery: Delivery | None) -> Outcome:
        check_request(event)
        if not event.user_id:
            return self._sweep(event, delivery)
        old_before = cutoff_of(event)
        if self._seen(event.event_id):
            self._continue(event, old_before)
            return Outcome.DUPLICATE
        for _ in range(_FOLD_ATTEMPTS):
            folds = self._fold(event, old_before)
            result = self._apply(event, old_before, folds)
            if result != "changed":
                break
        else:
            raise BatchChanged(f"the batch changed under {_FOLD_ATTEMPTS} folds in a row")
        if result == "dropped":
            return Outcome.DROPPED
        self._continue(event, old_before)
        return Outcome.DUPLICATE if result == "duplicate" else Outcome.APPLIED

    def _sweep(self, event: CompactionRequested, delivery: Delivery | None) -> Outcome:
        """A request without a user: one request per user of the app with old
        episodes. A scheduler publishes it with a fixed body, so the run's time is
        the message's publish time (the same on every redelivery, new on every run),
        and each request's id is derived from the sweep's id, that time and the
        user: a redelivered sweep publishes the same requests, which the ledger
        applies once. Nothing else is written, so the sweep needs no ledger row."""
        at = delivery.publish_time if delivery and delivery.publish_time else event.created_at
        run = format_time(at)
        with self.pool.connection() as conn:
            users = users_with_old_episodes(
                conn, event.app, cutoff(at, event.retention_days), event.project_id
            )
        requests = [
            replace(
                event,
                user_id=user,
                created_at=at,
                event_id=derived_event_id(event.event_id, run, user),
            )
            for user in users
        ]
        futures = [self.publisher.publish(request) for request in requests]
        for future in futures:
            future.result(timeout=self.settings.publish_timeout_seconds)
        log.info("compaction sweep", run=run, users=len(users))
        return Outcome.APPLIED

    # -- the steps ------------------------------------------------------------
    def _seen(self, event_id: str) -> bool:
        """Already applied? Saves the LLM calls of a redelivery (the claim decides)."""
        with self.pool.connection() as conn:
            return (
                conn.execute(
                    "SELECT 1 FROM processed_events WHERE consumer = %s AND event_id = %s",
                    (CONSUMER, event_id),
                ).fetchone()
                is not None
            )

    def _fold(self, event: CompactionRequested, old_before: datetime) -> list[Fold] | None:
        """Each scope's new summary, from a snapshot read outside the transaction.
        None for a deleted user."""
        with self.pool.connection() as conn:
            if _tombstoned(conn, event):
                return None
            episodes = _old_episodes(conn, event, old_before, event.batch_limit)
            store = MemoryStore(conn)
            planned = [
                (episodes_of, store.live_of_entity(_summary_key(event, project)), project)
                for project, episodes_of in _by_project(episodes).items()
            ]
        folds = []
        for episodes_of, previous, project in planned:
            previous_text = previous.text if previous is not None else ""
            text = self.llm.compact(
                previous_text,
                [e.as_turn() for e in episodes_of],
                self.settings.compaction_max_tokens,
            ).value.strip()
            newest = max(e.created_at for e in episodes_of)
            if previous is not None:
                newest = max(newest, previous.observed_at)
            key = replace(_summary_key(event, project), text=text, observed_at=newest)
            folds.append(Fold(key, episodes_of, previous))
        texts = [f.key.text for f in folds if f.key.text]
        vectors = iter(self.embedder.embed(texts) if texts else [])
        return [
            replace(f, key=replace(f.key, embedding=next(vectors))) if f.key.text else f
            for f in folds
        ]

    def _apply(
        self, event: CompactionRequested, old_before: datetime, folds: list[Fold] | None
    ) -> str:
        """One transaction: "applied", "duplicate", "dropped" (a deleted user) or
        "changed" (the batch is not what was folded; nothing written)."""
        with UnitOfWork(self.pool) as uow:
            conn = uow.conn
            assert conn is not None
            user_lock(conn, event.app, event.user_id)
            if not ProcessedEvents(conn).claim(CONSUMER, event.event_id):
                return "duplicate"
            if _tombstoned(conn, event):
                uow.commit()
                log.info("compaction dropped: the user was deleted", user_id=event.user_id)
                return "dropped"
            if folds is None:  # the tombstone seen before the fold is gone
                return "changed"
            folded = [e.id for f in folds for e in f.episodes]
            now = [e.id for e in _old_episodes(conn, event, old_before, event.batch_limit)]
            if sorted(now) != sorted(folded):
                return "changed"
            store = MemoryStore(conn)
            for fold in folds:
                current = store.live_of_entity(fold.key)
                if _identity(current) != _identity(fold.previous):
                    return "changed"
                if not fold.key.text:
                    continue  # episodes with no text at all: nothing to keep
                if current is None:
                    store.create(fold.key, event.event_id)
                else:
                    store.update(
                        current,
                        fold.key.text,
                        fold.key.kind,
                        fold.key.embedding,
                        fold.key.observed_at,
                        event.event_id,
                    )
            deleted = conn.execute(
                "DELETE FROM episodes WHERE app = %s AND user_id = %s AND id = ANY(%s::uuid[])",
                (event.app, event.user_id, folded),
            ).rowcount
            if deleted != len(folded):
                return "changed"
            uow.commit()
        log.info(
            "episodes compacted",
            user_id=event.user_id,
            project_id=event.project_id,
            folded=len(folded),
            summaries=[f.key.project_id or "(global)" for f in folds],
        )
        return "applied"

    def _continue(self, event: CompactionRequested, old_before: datetime) -> None:
        """Publish the continuation while old episodes remain (and the user exists)."""
        with self.pool.connection() as conn:
            if _tombstoned(conn, event) or not _old_episodes(conn, event, old_before, 1):
                return
        continuation = continuation_of(event)
        self.publisher.publish(continuation).result(timeout=self.settings.publish_timeout_seconds)
        log.info("compaction continues", continuation_event_id=continuation.event_id)


def _identity(memory: MemoryRow | None) -> tuple[str, str] | None:
    return None if memory is None else (memory.id, memory.text)


def handlers(resources: Resources) -> dict[str, HandlerTable]:
    """The handler table of each subscription this worker consumes."""
    assert resources.pool is not None and resources.llm is not None
    assert resources.embedder is not None and resources.publisher is not None
    compaction = Compaction(
        resources.pool,
        resources.llm,
        resources.embedder,
        resources.settings,
        resources.publisher,
    )
    return {"compaction-requests": {CompactionRequested: [compaction.handle_request]}}
