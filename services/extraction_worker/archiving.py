"""A turn event's own step in the extraction worker: the turn is archived (and
searchable at once) and joins its session's extraction window, or, when it holds
nothing worth remembering (`shared.memory.worth`), is done with no model call.

The search keys of the turn and of its neighbours are computed from a snapshot
read with no lock and embedded with no transaction open; then one short
transaction takes the user's lock, checks that the session's turns around it are
still those of the snapshot (else everything is computed again:
`shared.db.planned_write`), archives the turn, and puts it in the window. Whether
the window closes is decided in the same transaction (it holds
`AM_EXTRACTION_WINDOW_TURNS` turns; or the turn was recorded before a flush of its
session that came first), and so is whether the user's previous session is to be
closed; the extraction requests that say so are
published after the commit (`Enrolled.requests`).

The turn's ledger row is written when its memories are (`windows`), or here for
a turn the filter skips or a deleted user's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import structlog

from shared.bus.contract import Outcome
from shared.config import Settings
from shared.db.episodes import Episode, KeyPlan
from shared.db.ledger import claimed, peeked
from shared.db.planned_write import Done, StalePlan, write_for_user
from shared.db.unit_of_work import UnitOfWork
from shared.db.windows import PendingTurn, WindowKey
from shared.embeddings.base import Embedder
from shared.events import (
    ExtractionRequested,
    Limits,
    TurnRecorded,
    derived_event_id,
    encode,
)
from shared.memory.worth import skip_reason
from shared.metrics import EXTRACTION_SKIPPED

log = structlog.get_logger("agent_memory.extraction")

TURNS_SUBSCRIPTION = "turns-extraction"

Units = Callable[[], UnitOfWork]
# The search keys to write (None: the turn is archived already, or its user deleted)
# and their embeddings.
Keying = tuple[KeyPlan | None, list]


@dataclass(frozen=True)
class Enrolled:
    outcome: Outcome
    requests: list[ExtractionRequested] = field(default_factory=list)  # publish after commit
    skipped: str | None = None  # the filter's reason


def episode_of(event: TurnRecorded) -> Episode:
    return Episode(
        app=event.app,
        user_id=event.user_id,
        project_id=event.project_id,
        session_id=event.session_id,
        turn_id=event.turn_id,
        event_id=event.event_id,
        user_text=event.user,
        assistant_text=event.assistant,
        tool_events=[
            {"name": t.name, "arguments": t.arguments, "output": t.output}
            for t in event.tool_events
        ],
        created_at=event.created_at,
        agent_id=event.agent_id,
    )


def pending_of(event: TurnRecorded, published_at: datetime | None) -> PendingTurn:
    return PendingTurn(
        event_id=event.event_id,
        turn_id=event.turn_id,
        project_id=event.project_id,
        prev_session_id=event.prev_session_id,
        created_at=event.created_at,
        user_text=event.user,
        assistant_text=event.assistant,
        published_at=published_at,
        agent_id=event.agent_id,
    )


def request(
    session: WindowKey, reason: str, window_id: str, created_at: datetime
) -> ExtractionRequested:
    """The request that extracts `session`'s window `window_id` (the turns it closed
    with; for a flush and the next session's start, every turn waiting). Its
    `created_at` is the turn's that closed the window, or the database's time for
    the idle sweep: never this worker's own clock, which may be off."""
    return ExtractionRequested(
        event_id=window_id,
        app=session.app,
        user_id=session.user_id,
        session_id=session.session_id,
        reason=reason,
        created_at=created_at,
    )


def window_id(session: WindowKey, reason: str, cause: str) -> str:
    """A window's id, derived from what closed it: a redelivery closes the same one."""
    parts = ("extraction-window", session.app, session.user_id, session.session_id)
    return derived_event_id(*parts, reason, cause)


@dataclass
class Archiver:
    units: Units
    embedder: Embedder
    settings: Settings

    def enroll(self, event: TurnRecorded, published_at: datetime | None) -> Enrolled:
        episode = episode_of(event)
        skip = None
        if self.settings.extraction_filter:
            skip = skip_reason(event.user, event.assistant, len(event.tool_events))
        neighbours = self.settings.episode_key_neighbours

        def plan() -> Keying | Done[Enrolled]:
            with self.units() as uow:  # reads only: no lock is taken
                seen = peeked(uow.ledger, TURNS_SUBSCRIPTION, event)
                if seen is Outcome.DUPLICATE:
                    return Done(Enrolled(Outcome.DUPLICATE))
                plan = None
                # A deleted user's text never reaches the embedder: the transaction
                # drops the event.
                if seen is None and not uow.episodes.archived(episode):
                    plan = uow.episodes.plan_archive(
                        episode, neighbours, self.settings.episode_key_dated
                    )
            vectors = self.embedder.embed(plan.texts) if plan is not None and plan.keys else []
            return plan, vectors

        def write(uow: UnitOfWork, keying: Keying) -> Enrolled:
            return self._write(uow, event, episode, *keying, skip, published_at)

        enrolled = write_for_user(
            self.units,
            event.app,
            event.user_id,
            self.settings.write_attempts,
            f"the turns around {event.turn_id}",
            plan,
            write,
        )
        if enrolled.skipped:
            EXTRACTION_SKIPPED.labels(enrolled.skipped).inc()
        return enrolled

    def _write(
        self,
        uow: UnitOfWork,
        event: TurnRecorded,
        episode: Episode,
        plan: KeyPlan | None,
        vectors: list,
        skip: str | None,
        published_at: datetime | None,
    ) -> Enrolled:
        """One transaction under the user's lock; StalePlan when the snapshot is stale."""
        # The turn's own ledger row comes with its window's memories.
        stop = claimed(uow.ledger, TURNS_SUBSCRIPTION, event, record=False)
        if stop is not None:
            return Enrolled(stop)
        archived = False
        if plan is not None:
            written = uow.episodes.archive(
                episode, plan, vectors, self.settings.episode_key_neighbours
            )
            if written is None:
                raise StalePlan("the session's turns around it changed")
            archived = written
        session = WindowKey(event.app, event.user_id, event.session_id)
        if skip is not None:
            # Never extracted, but it may still close its window (a session's last turn
            # after its flush) or the previous session's (a new session's first turn).
            uow.ledger.record(TURNS_SUBSCRIPTION, event.event_id)
            requests = self._closes(uow, session, event, published_at, None)
            return Enrolled(Outcome.APPLIED, requests, skipped=skip)
        limits = Limits(self.settings.max_message_bytes, self.settings.max_tool_events_bytes)
        message = encode(event, limits).data
        joined = uow.windows.enroll(session, pending_of(event, published_at), message)
        requests = self._closes(uow, session, event, published_at, joined)
        outcome = Outcome.APPLIED if joined or archived else Outcome.DUPLICATE
        return Enrolled(outcome, requests)

    def _closes(
        self,
        uow: UnitOfWork,
        session: WindowKey,
        event: TurnRecorded,
        published_at: datetime | None,
        joined: bool | None,
    ) -> list[ExtractionRequested]:
        """The extraction requests this turn makes (their windows closed). `joined`:
        the turn joined its window now (True), was there already (False: a
        redelivery), or joins none (None: the filter skipped it)."""
        requests = []
        if joined is False:
            # A redelivery: the request its first delivery made may not have gone out.
            closed = uow.windows.window_of(session, event.event_id)
            if closed is not None:
                requests.append(request(session, "full", closed, event.created_at))
        else:
            flushed = uow.windows.flushed_through(session)
            if flushed is not None and published_at is not None and published_at <= flushed:
                reason = "late"
            elif (
                joined and uow.windows.open_count(session) >= self.settings.extraction_window_turns
            ):
                reason = "full"
            else:
                reason = ""
            if reason:
                closing = window_id(session, reason, event.event_id)
                if uow.windows.close(session, closing):
                    requests.append(request(session, reason, closing, event.created_at))
        if event.prev_session_id and event.prev_session_id != event.session_id:
            previous = WindowKey(event.app, event.user_id, event.prev_session_id)
            if uow.windows.flushed_through(previous) is None:
                # The user's next session began: the request closes the previous one's
                # window, and a turn of it still in flight closes it again when it
                # arrives. Once (the request marks the previous session flushed): a
                # previous session that goes on beside this one closes its windows by
                # itself after that.
                closing = window_id(previous, "next_session", event.event_id)
                requests.append(request(previous, "next_session", closing, event.created_at))
        return requests
