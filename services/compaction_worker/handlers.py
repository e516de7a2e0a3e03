"""Handlers of the compaction worker: a user's old episodes compacted into long-term
summaries (docs/design.md, "Compaction").

For `compaction.requested.v1`: the user's episodes older than the event's
`created_at` minus `retention_days` (the event's time, not the clock's, so a
redelivery or a continuation selects against the same cut-off), oldest first, at
most `batch_limit`, only the request's project if it names one. The episodes of
each project (no project: the global scope) are compacted, with that scope's previous
compacted summary, into one `event` memory of entity `compacted-episodes` — by the
LLM, outside any transaction. Then in ONE transaction holding the user's advisory
lock: the ledger row, each summary (a CREATED or UPDATED revision with the event's
id), and the deletion of exactly the episodes compacted. If, under the lock, the batch
or a previous summary is no longer what was compacted (a concurrent writer), nothing
is written and the compaction is done again (`shared.db.planned_write`).

More old episodes left: a continuation request is published after the commit,
with the same cut-off and an event_id derived from this one's, so publishing it
twice is harmless. A failed publish raises (the message is redelivered); the
redelivery finds the ledger row and publishes the continuation again while old
episodes remain. Every request compactions at least one episode when any remain, so a
chain of continuations ends.

A user deleted (table `deleted_users`) after the request was made: the request is
ledgered, nothing is compacted and nothing continues.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import psycopg
import structlog

from shared.bootstrap import Resources
from shared.bus.contract import Delivery, Outcome
from shared.bus.publisher import EventPublisher
from shared.config import Settings
from shared.db.episodes import Episodes, OldEpisode
from shared.db.ledger import claimed, peeked
from shared.db.memory_rows import COMPACTED_ENTITY, MemoryRow, NewMemory
from shared.db.planned_write import StalePlan, write_for_user
from shared.db.unit_of_work import UnitOfWork, UnitsOfWork
from shared.embeddings.base import Embedder
from shared.errors import PermanentError
from shared.events import CompactionRequested, derived_event_id, format_time
from shared.llm.base import LLM, DialogueTurn
from shared.memory.expiry import retire_expired

log = structlog.get_logger("agent_memory.compaction")

APPLIER = "compaction"
SUMMARY_ENTITY = COMPACTED_ENTITY
_EARLIEST = datetime.min.replace(tzinfo=UTC)


def as_turn(episode: OldEpisode) -> DialogueTurn:
    return DialogueTurn(
        f"{episode.session_id}/{episode.turn_id}",
        episode.created_at,
        episode.user_text,
        episode.assistant_text,
    )


@dataclass(frozen=True)
class ScopeCompaction:
    """One scope's share of a batch: its episodes and the summary they are compacted into."""

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
    return Episodes(conn).users_with_old(app, cutoff, project_id)


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


def _summary_key(event: CompactionRequested, project_id: str, agent_id: str) -> NewMemory:
    """The summary of one project (or none) and one agent (or none): an agent's turns
    are summed up for that agent alone, as its memories are (shared.memory.agents)."""
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
        agent_id=agent_id,
    )


def _old_episodes(
    episodes: Episodes, event: CompactionRequested, old_before: datetime, limit: int
) -> list[OldEpisode]:
    return episodes.old(event.app, event.user_id, event.project_id, old_before, limit)


def _tombstoned(uow: UnitOfWork, event: CompactionRequested) -> bool:
    """Was the user deleted (GDPR) after this request was made?"""
    return uow.tombstones.covers(event.app, event.user_id, event.created_at)


def _by_owner(episodes: list[OldEpisode]) -> dict[tuple[str, str], list[OldEpisode]]:
    """The episodes by project and agent: one summary each."""
    groups: dict[tuple[str, str], list[OldEpisode]] = {}
    for episode in episodes:
        groups.setdefault((episode.project_id, episode.agent_id), []).append(episode)
    return groups


@dataclass
class Compaction:
    units: Callable[[], UnitOfWork]
    llm: LLM
    embedder: Embedder
    settings: Settings
    publisher: EventPublisher

    def handle_request(self, event: CompactionRequested, delivery: Delivery | None) -> Outcome:
        check_request(event)
        if not event.user_id:
            return self._sweep(event, delivery)
        old_before = cutoff_of(event)
        with self.units() as uow:
            # Saves the model calls of a redelivery (the claim in the transaction decides).
            seen = peeked(uow.ledger, APPLIER, event)
        if seen is Outcome.DUPLICATE:
            self._continue(event, old_before)
            return Outcome.DUPLICATE
        outcome = write_for_user(
            self.units,
            event.app,
            event.user_id,
            self.settings.write_attempts,
            "the batch of old episodes",
            lambda: self._compact(event, old_before),
            lambda uow, compactions: self._apply(uow, event, old_before, compactions),
        )
        if outcome is Outcome.DROPPED:
            log.info("compaction dropped: the user was deleted", user_id=event.user_id)
        else:
            self._continue(event, old_before)
        return outcome

    def _sweep(self, event: CompactionRequested, delivery: Delivery | None) -> Outcome:
        """A request without a user: one request per user of the app with old
        episodes. A scheduler publishes it with a fixed body, so the run's time is
        the message's publish time (the same on every redelivery, new on every run),
        and each request's id is derived from the sweep's id, that time and the
        user: a redelivered sweep publishes the same requests, which the ledger
        applies once. It first retires the app's expired memories (shared.memory.expiry),
        which retires nothing twice; so the sweep needs no ledger row."""
        at = delivery.publish_time if delivery and delivery.publish_time else event.created_at
        run = format_time(at)
        retired = retire_expired(self.units, event.app)  # before the compactions
        log.info(
            "expired memories retired",
            app=event.app,
            memories=retired.memories,
            revisions=retired.revisions,
        )
        with self.units() as uow:
            users = uow.episodes.users_with_old(
                event.app, cutoff(at, event.retention_days), event.project_id
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
    def _compact(
        self, event: CompactionRequested, old_before: datetime
    ) -> list[ScopeCompaction] | None:
        """Each scope's new summary, from a snapshot read outside the transaction.
        None for a deleted user."""
        with self.units() as uow:
            if _tombstoned(uow, event):
                return None
            episodes = _old_episodes(uow.episodes, event, old_before, event.batch_limit)
            memories = uow.memories
            planned = [
                (episodes_of, memories.live_of_entity(_summary_key(event, *owner)), owner)
                for owner, episodes_of in _by_owner(episodes).items()
            ]
        compactions = []
        for episodes_of, previous, owner in planned:
            previous_text = previous.text if previous is not None else ""
            text = self.llm.compact(
                previous_text,
                [as_turn(e) for e in episodes_of],
                self.settings.compaction_max_tokens,
            ).value.strip()
            newest = max(e.created_at for e in episodes_of)
            if previous is not None:
                newest = max(newest, previous.observed_at)
            key = replace(_summary_key(event, *owner), text=text, observed_at=newest)
            compactions.append(ScopeCompaction(key, episodes_of, previous))
        texts = [f.key.text for f in compactions if f.key.text]
        vectors = iter(self.embedder.embed(texts) if texts else [])
        return [
            replace(f, key=replace(f.key, embedding=next(vectors))) if f.key.text else f
            for f in compactions
        ]

    def _apply(
        self,
        uow: UnitOfWork,
        event: CompactionRequested,
        old_before: datetime,
        compactions: list[ScopeCompaction] | None,
    ) -> Outcome:
        """The transaction under the user's lock; StalePlan when the batch or a summary
        is not what was compacted (compact again)."""
        stop = claimed(uow.ledger, APPLIER, event)
        if stop is not None:
            return stop
        if compactions is None:
            raise StalePlan("the user's tombstone seen before the compaction is gone")
        compacted = [e.id for f in compactions for e in f.episodes]
        now = [e.id for e in _old_episodes(uow.episodes, event, old_before, event.batch_limit)]
        if sorted(now) != sorted(compacted):
            raise StalePlan("the batch of old episodes changed")
        self._write(uow, event, compactions)
        if uow.episodes.delete(event.app, event.user_id, compacted) != len(compacted):
            raise StalePlan("episodes of the batch were deleted meanwhile")
        log.info(
            "episodes compacted",
            user_id=event.user_id,
            project_id=event.project_id,
            compacted=len(compacted),
            summaries=[f.key.project_id or "(global)" for f in compactions],
        )
        return Outcome.APPLIED

    @staticmethod
    def _write(
        uow: UnitOfWork, event: CompactionRequested, compactions: list[ScopeCompaction]
    ) -> None:
        """Each compaction's summary; StalePlan when a summary is no longer the one that was
        compacted."""
        for compaction in compactions:
            current = uow.memories.live_of_entity(compaction.key)
            if _identity(current) != _identity(compaction.previous):
                raise StalePlan("a previous summary changed")
            if not compaction.key.text:
                continue  # episodes with no text at all: nothing to keep
            if current is None:
                uow.memories.create(compaction.key, event.event_id)
            else:
                uow.memories.update(
                    current,
                    compaction.key.text,
                    compaction.key.kind,
                    compaction.key.embedding,
                    compaction.key.observed_at,
                    event.event_id,
                )

    def _continue(self, event: CompactionRequested, old_before: datetime) -> None:
        """Publish the continuation while old episodes remain (and the user exists)."""
        with self.units() as uow:
            if _tombstoned(uow, event) or not _old_episodes(uow.episodes, event, old_before, 1):
                return
        continuation = continuation_of(event)
        self.publisher.publish(continuation).result(timeout=self.settings.publish_timeout_seconds)
        log.info("compaction continues", continuation_event_id=continuation.event_id)


def _identity(memory: MemoryRow | None) -> tuple[str, str] | None:
    return None if memory is None else (memory.id, memory.text)


def handlers(resources: Resources) -> dict[type, Callable[..., Outcome]]:
    """The handler of each event type this worker's subscriptions carry."""
    assert resources.pool is not None and resources.llm is not None
    assert resources.embedder is not None and resources.publisher is not None
    compaction = Compaction(
        UnitsOfWork(resources.pool, "compaction"),
        resources.llm,
        resources.embedder,
        resources.settings,
        resources.publisher,
    )
    return {CompactionRequested: compaction.handle_request}
