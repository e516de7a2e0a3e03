"""Handlers of the summary worker."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from services.summary_worker.folding import Folder, FoldPolicy
from shared.bootstrap import Resources
from shared.bus.worker import BatchHandler, BatchResult, Delivery, HandlerTable, Outcome
from shared.events import Event, TurnRecorded
from shared.session_buffer import AppendResult, BufferedTurn, SessionBuffer, SessionKey


def record_turns(
    items: Sequence[tuple[Event, Delivery]], *, buffer: SessionBuffer, folder: Folder
) -> list[BatchResult]:
    """Put each turn in its session's buffer in `created_at` order, exactly once
    (the API usually did already), all in one Valkey round trip; a turn whose
    buffer is then over a trigger goes on to summarize-before-trim on a handler
    thread. A fold that fails raises: the buffer is untouched and the message is
    redelivered, and a redelivery folds even though the append is then a no-op."""
    results: list[BatchResult] = []
    appends, waiting = [], []  # what goes to Valkey, and the places of their results
    for event, _delivery in items:
        try:
            key = _key(event)
            appends.append((key, BufferedTurn.from_event(event), event.prev_session_id))  # type: ignore[attr-defined]
        except Exception as exc:  # this event's alone: the others still go
            results.append(exc)
            continue
        waiting.append(len(results))
        results.append(Outcome.APPLIED)  # replaced below
    for place, append, appended in zip(
        waiting, appends, buffer.append_many(appends) if appends else [], strict=True
    ):
        results[place] = _next_step(append[0], appended, folder)
    return results


def record_turn(
    event: TurnRecorded, delivery: Delivery, *, buffer: SessionBuffer, folder: Folder
) -> Outcome:
    """`record_turns` for one turn, every step on this thread."""
    result = record_turns([(event, delivery)], buffer=buffer, folder=folder)[0]
    if isinstance(result, Exception):
        raise result
    return result if isinstance(result, Outcome) else result()


def _key(event: Event) -> SessionKey:
    assert isinstance(event, TurnRecorded)
    return SessionKey(event.app, event.user_id, event.session_id)


def _next_step(key: SessionKey, appended: AppendResult | Exception, folder: Folder) -> BatchResult:
    if isinstance(appended, Exception):
        return appended
    if appended.dropped:
        return Outcome.DROPPED  # the user was deleted after this turn was created
    outcome = Outcome.APPLIED if appended.added else Outcome.DUPLICATE
    if not folder.policy.foldable(appended.turn_count, appended.tokens):
        return outcome
    return partial(_fold, folder, key, appended, outcome)


def _fold(folder: Folder, key: SessionKey, appended: AppendResult, outcome: Outcome) -> Outcome:
    folder.fold_if_due(key, appended)
    return outcome


def handlers(resources: Resources) -> dict[str, HandlerTable]:
    """The handler table of each subscription this worker consumes."""
    assert resources.buffer is not None and resources.llm is not None
    folder = Folder(resources.buffer, resources.llm, FoldPolicy.from_settings(resources.settings))
    batch = BatchHandler(partial(record_turns, buffer=resources.buffer, folder=folder))
    return {"turns-summary": {TurnRecorded: batch}}
