"""Handlers of the extraction worker."""

from __future__ import annotations

from functools import partial

from psycopg_pool import ConnectionPool

from shared.bootstrap import Resources
from shared.bus.worker import Delivery, HandlerTable, Outcome
from shared.db.pool import UnitOfWork
from shared.db.repositories import Episode, Episodes, ProcessedEvents
from shared.events import TurnRecorded

TURNS_CONSUMER = "turns-extraction"


def archive_turn(event: TurnRecorded, delivery: Delivery, *, pool: ConnectionPool) -> Outcome:
    """Archive the turn as an episode; the ledger row commits with it, so exactly once."""
    with UnitOfWork(pool) as uow:
        if not ProcessedEvents(uow.conn).claim(TURNS_CONSUMER, event.event_id):
            return Outcome.DUPLICATE
        Episodes(uow.conn).add(
            Episode(
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
            )
        )
        uow.commit()
    return Outcome.APPLIED


def handlers(resources: Resources) -> dict[str, HandlerTable]:
    """The handler table of each subscription this worker consumes."""
    assert resources.pool is not None
    return {
        "turns-extraction": {
            TurnRecorded: [partial(archive_turn, pool=resources.pool)],
        },
    }
