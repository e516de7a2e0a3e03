"""Extraction of a session's window: what its turns state becomes memories, in one
extraction call and one consolidation call (`planning`), with no transaction
open while the model decides; then one short transaction under the user's lock
checks that the window still holds those turns and the memories they were
weighed against are unchanged, writes the memories (with the late-event rule)
and the profile values the turns state (`shared.profiles.writing`),
records each turn in the ledger and empties the window. If anything changed in
between, the window is decided again from fresh reads (`shared.db.planned_write`,
at most `AM_WRITE_ATTEMPTS` times); then the request fails as an event error
and is retried after the subscription's backoff (nothing is written meanwhile,
so nothing is lost or doubled).

When a request exhausts its attempts on an error of its own, `dead_letter_window`
(its subscription's dead-letter hook) hands each turn of the window back to the
dead letters of `turns-extraction` with the reason, where each can be replayed
on its own: a replayed turn joins a new window.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog

from services.extraction_worker.archiving import TURNS_SUBSCRIPTION
from services.extraction_worker.planning import Planner
from shared.bus.attributes import dead_letter_attributes
from shared.bus.contract import DeadLetterNotice, Outcome
from shared.bus.publisher import EventPublisher
from shared.bus.topology import dead_letter_name, full_name
from shared.config import Settings
from shared.db.planned_write import Done, StalePlan, user_transaction, write_for_user
from shared.db.unit_of_work import UnitOfWork
from shared.db.windows import PendingTurn, WindowKey
from shared.events import SCHEMA_VERSION, ExtractionRequested, TurnRecorded
from shared.events.models import ordering_key
from shared.llm.base import ExtractionInput, ExtractionTurn
from shared.memory.consolidate import Applied, Source
from shared.memory.decisions import Planned, apply, verify
from shared.memory.ranking import Fusion
from shared.profiles.writing import Update, apply_updates

log = structlog.get_logger("agent_memory.extraction")

Units = Callable[[], UnitOfWork]
# A window's turns, what the model decided they do to the memories, and the
# profile values they state.
WindowPlan = tuple[list[PendingTurn], list[Planned], list[Update]]


def window_input(session: WindowKey, turns: list[PendingTurn]) -> ExtractionInput:
    """The window as the model sees it: the texts of its turns, oldest first."""
    prev = next((t.prev_session_id for t in turns if t.prev_session_id), "")
    return ExtractionInput(
        session.session_id,
        prev,
        tuple(
            ExtractionTurn(t.turn_id, t.project_id, t.created_at, t.user_text, t.assistant_text)
            for t in turns
        ),
    )


def sources_of(session: WindowKey, turns: list[PendingTurn]) -> dict[str, Source]:
    return {
        t.turn_id: Source(
            session.app,
            session.user_id,
            t.project_id,
            session.session_id,
            t.created_at,
            t.event_id,
            agent_id=t.agent_id,
        )
        for t in turns
    }


@dataclass
class WindowExtraction:
    units: Units
    planner: Planner
    settings: Settings

    def extract(self, session: WindowKey, window_id: str) -> Outcome:
        """Extract the session's closed window `window_id`: APPLIED, or DUPLICATE when
        none of its turns waits any more (extracted already, or dead-lettered)."""

        def plan() -> WindowPlan | Done[None]:
            with self.units() as uow:  # a read: no lock
                turns = uow.windows.pending(session, window_id)
            if not turns:
                return Done(None)
            inp, sources = window_input(session, turns), sources_of(session, turns)
            return turns, self.planner.plan(inp, sources), self.planner.plan_profile(inp, sources)

        def write(uow: UnitOfWork, planned: WindowPlan) -> tuple[int, list[Applied]] | None:
            return len(planned[0]), self._write(uow, session, *planned)

        extracted = write_for_user(
            self.units,
            session.app,
            session.user_id,
            self.settings.write_attempts,
            f"the window of {session.session_id} or its memories",
            plan,
            write,
        )
        if extracted is None:
            return Outcome.DUPLICATE
        turns, applied = extracted
        log.info(
            "window extracted",
            session=session.session_id,
            turns=turns,
            actions=[a.action.value for a in applied],
        )
        return Outcome.APPLIED

    def _write(
        self,
        uow: UnitOfWork,
        session: WindowKey,
        turns: list[PendingTurn],
        planned: list[Planned],
        profile: list[Update],
    ) -> list[Applied]:
        """One transaction under the user's lock; StalePlan when what was decided on changed."""
        ids = [t.event_id for t in turns]
        waiting = {t.event_id for t in uow.windows.pending(session, lock=True)}
        if not waiting.issuperset(ids):
            raise StalePlan("its turns were extracted or dead-lettered meanwhile")
        fusion = Fusion.from_settings(self.settings)
        verify(uow, planned, fusion, self.settings.consolidation_neighbours)
        # A turn already in the ledger (a dead letter replayed twice) adds nothing again.
        new = {event_id for event_id in ids if uow.ledger.record(TURNS_SUBSCRIPTION, event_id)}
        applied = apply(uow, [p for p in planned if p.source.event_id in new])
        updates = [u for u in profile if u.source_event_id in new]
        if updates:
            apply_updates(uow, session.app, session.user_id, updates)
        uow.windows.remove(session, ids)
        return applied


def dead_letter_window(
    units: Units, publisher: EventPublisher, settings: Settings, letter: DeadLetterNotice
) -> None:
    """The hook of `extraction-requests`: a request about to be dead-lettered hands
    each turn of its window to the dead letters of `turns-extraction`, unchanged,
    with the reason, then empties the window. A crash in between hands some turns
    over twice; replaying both copies applies the turn once (the ledger). A request
    that could not be read names no window: nothing of any session is touched."""
    if not isinstance(letter.event, ExtractionRequested):
        return
    e = letter.event
    session = WindowKey(e.app, e.user_id, e.session_id)
    with units() as uow:
        turns = uow.windows.messages(session, e.event_id)
    if not turns:
        return
    project = settings.google_cloud_project
    topic = publisher.client.topic_path(
        project, full_name(settings.topic_prefix, dead_letter_name(TURNS_SUBSCRIPTION))
    )
    reason = f"its extraction window ({len(turns)} turns) failed: {letter.reason}"
    key = ordering_key(session.app, session.user_id, session.session_id)
    futures = []
    for event_id, data in turns:
        attributes = {
            "event_id": event_id,
            "event_type": TurnRecorded.EVENT_TYPE,
            "schema_version": SCHEMA_VERSION,
            "app": session.app,
        }
        attempts = settings.max_delivery_attempts  # the window's, spent by its request
        dead = dead_letter_attributes(attributes, reason, TURNS_SUBSCRIPTION, attempts, key)
        futures.append(publisher.publish_raw(topic, data, dead))
    for future in futures:
        future.result(timeout=settings.publish_timeout_seconds)
    with user_transaction(units, session.app, session.user_id) as uow:
        uow.windows.remove(session, [event_id for event_id, _data in turns])
    log.warning("window dead-lettered", session=session.session_id, turns=len(turns), reason=reason)
