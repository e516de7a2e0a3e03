"""Handlers of the summary worker."""

from __future__ import annotations

from functools import partial

from services.summary_worker.folding import Folder, FoldPolicy
from shared.bootstrap import Resources
from shared.bus.worker import Delivery, HandlerTable, Outcome
from shared.events import TurnRecorded
from shared.session_buffer import BufferedTurn, SessionBuffer, SessionKey


def record_turn(
    event: TurnRecorded, delivery: Delivery, *, buffer: SessionBuffer, folder: Folder
) -> Outcome:
    """Put the turn in its session's buffer in `created_at` order, exactly once (the
    API usually did already), then summarize-before-trim if the buffer is over a
    trigger. A fold that fails raises: the buffer is untouched and the message is
    redelivered, and a redelivery folds even though the append is then a no-op."""
    key = SessionKey(event.app, event.user_id, event.session_id)
    appended = buffer.append(key, BufferedTurn.from_event(event), event.prev_session_id)
    if appended.dropped:
        return Outcome.DROPPED  # the user was deleted after this turn was created
    folder.fold_if_due(key, appended)
    return Outcome.APPLIED if appended.added else Outcome.DUPLICATE


def handlers(resources: Resources) -> dict[str, HandlerTable]:
    """The handler table of each subscription this worker consumes."""
    assert resources.buffer is not None and resources.llm is not None
    folder = Folder(resources.buffer, resources.llm, FoldPolicy.from_settings(resources.settings))
    return {
        "turns-summary": {
            TurnRecorded: [partial(record_turn, buffer=resources.buffer, folder=folder)],
        },
    }
