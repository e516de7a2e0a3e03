"""Handlers of the summary worker.

A turn is appended to its session's buffer with the other turns of its pull, in
one Valkey round trip (`record_turns`); a turn whose buffer is then over a
trigger goes on to summarize-before-trim (`fold`) on a handler thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from services.summary_worker.folding import Folder, FoldPolicy
from shared.bootstrap import Resources
from shared.bus.contract import BatchHandler, BatchResult, Continue, Delivery, Outcome
from shared.events import Event, TurnRecorded
from shared.session_buffer import AppendResult, BufferedTurn, SessionBuffer, SessionKey


def record_turns(
    items: Sequence[tuple[Event, Delivery]], *, buffer: SessionBuffer, policy: FoldPolicy
) -> list[BatchResult]:
    """Put each turn in its session's buffer in `created_at` order, exactly once
    (the API usually did already), all in one Valkey round trip. A turn whose
    buffer is then over a trigger continues to `fold`, with its append's result."""
    results: list[BatchResult] = []
    appends, waiting = [], []  # what goes to Valkey, and the places of their results
    for event, _delivery in items:
        try:
            key = _key(event)
            assert isinstance(event, TurnRecorded)  # the table routes only turns here
            appends.append((key, BufferedTurn.from_event(event), event.prev_session_id))
        except Exception as exc:  # this event's alone: the others still go
            results.append(exc)
            continue
        waiting.append(len(results))
        results.append(Outcome.APPLIED)  # replaced below
    appended_all = buffer.append_many(appends) if appends else []
    for place, appended in zip(waiting, appended_all, strict=True):
        results[place] = _after_append(appended, policy)
    return results


def fold(event: Event, _delivery: Delivery, appended: AppendResult, *, folder: Folder) -> Outcome:
    """Summarize-before-trim for the turn's session. A fold that fails raises: the
    buffer is untouched and the message is redelivered, and a redelivery folds
    even though its append is then a no-op."""
    folder.fold_if_due(_key(event), appended)
    return _appended(appended)


def _key(event: Event) -> SessionKey:
    if not isinstance(event, TurnRecorded):
        raise TypeError(f"the summary worker takes turns, not {type(event).__name__}")
    return SessionKey(event.app, event.user_id, event.session_id)


def _after_append(appended: AppendResult | Exception, policy: FoldPolicy) -> BatchResult:
    if isinstance(appended, Exception):
        return appended
    if appended.dropped:
        return Outcome.DROPPED  # the user was deleted after this turn was created
    if policy.foldable(appended.turn_count, appended.tokens):
        return Continue(appended)
    return _appended(appended)


def _appended(appended: AppendResult) -> Outcome:
    return Outcome.APPLIED if appended.added else Outcome.DUPLICATE


def handlers(resources: Resources) -> dict[type, BatchHandler]:
    """The handler of each event type this worker's subscriptions carry."""
    assert resources.buffer is not None and resources.llm is not None
    folder = Folder(resources.buffer, resources.llm, FoldPolicy.from_settings(resources.settings))
    batch = BatchHandler(
        first=partial(record_turns, buffer=resources.buffer, policy=folder.policy),
        then=partial(fold, folder=folder),
    )
    return {TurnRecorded: batch}
