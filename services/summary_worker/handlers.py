"""Handlers of the summary worker."""

from __future__ import annotations

from functools import partial

from shared.bootstrap import Resources
from shared.bus.worker import Delivery, HandlerTable, Outcome
from shared.events import TurnRecorded
from shared.session_buffer import BufferedTurn, SessionBuffer, SessionKey


def append_turn_to_buffer(
    event: TurnRecorded, delivery: Delivery, *, buffer: SessionBuffer
) -> Outcome:
    """Put the turn in its session's buffer, in `created_at` order, exactly once."""
    key = SessionKey(event.app, event.user_id, event.session_id)
    added = buffer.append(key, BufferedTurn.from_event(event))
    return Outcome.APPLIED if added else Outcome.DUPLICATE


def handlers(resources: Resources) -> dict[str, HandlerTable]:
    """The handler table of each subscription this worker consumes."""
    assert resources.buffer is not None
    return {
        "turns-summary": {
            TurnRecorded: [partial(append_turn_to_buffer, buffer=resources.buffer)],
        },
    }
