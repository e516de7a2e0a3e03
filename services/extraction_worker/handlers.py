"""Handlers of the extraction worker (docs/design.md, "Extraction windows").

- `turns-extraction`: a turn is archived at once and joins its session's window
  (`archiving`); a window that closes publishes an extraction request.
- `extraction-requests`: a session's window is extracted, in one extraction and
  one consolidation call (`windows`); its dead letters hand the window's turns
  to `turns-extraction`'s dead letters, one by one.
- `memory-generate-extraction`: the contents of a generate request are extracted
  the same way, as a window of one, and its operation completed.

No model or embedding call happens with a transaction open or a lock held:
each handler decides first, then writes in one short transaction that takes the
user's lock and checks what it decided on. The ledger makes each effect happen
once however often an event is delivered.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

import structlog

from services.extraction_worker.archiving import TURNS_SUBSCRIPTION, Archiver
from services.extraction_worker.planning import Planner
from services.extraction_worker.windows import WindowExtraction, dead_letter_window
from shared.bootstrap import Resources
from shared.bus.contract import DeadLetterHook, DeadLetterNotice, Delivery, Outcome
from shared.bus.publisher import EventPublisher
from shared.config import Settings
from shared.db.ledger import claimed, peeked
from shared.db.planned_write import user_transaction, write_for_user
from shared.db.unit_of_work import UnitOfWork, UnitsOfWork
from shared.db.windows import WindowKey
from shared.embeddings.base import Embedder
from shared.events import ExtractionRequested, MemoriesGenerate, TurnRecorded
from shared.llm.base import LLM, Action, ExtractionInput
from shared.memory.consolidate import Applied, Source
from shared.memory.decisions import Planned, apply, verify
from shared.memory.ranking import Fusion
from shared.profiles.writing import Update, apply_updates

log = structlog.get_logger("agent_memory.extraction")

GENERATE_SUBSCRIPTION = "memory-generate-extraction"
REQUESTS = "extraction-requests"
# Requests that close the session's open window themselves (the others extract a
# window the turns' own transaction closed under the request's id).
CLOSING = ("flush", "next_session")
Units = Callable[[], UnitOfWork]
# What becomes of an extraction request: published (the worker) or handled at once.
Request = Callable[[ExtractionRequested], None]

__all__ = ["GENERATE_SUBSCRIPTION", "REQUESTS", "TURNS_SUBSCRIPTION", "Extraction", "handlers"]


@dataclass
class Extraction:
    units: Units
    llm: LLM
    embedder: Embedder
    settings: Settings
    request: Request  # publishes an extraction request (and waits for Pub/Sub's word)

    def __post_init__(self) -> None:
        self.planner = Planner(self.units, self.llm, self.embedder, self.settings)
        self.archiver = Archiver(self.units, self.embedder, self.settings)
        self.windows = WindowExtraction(self.units, self.planner, self.settings)

    def handle_turn(self, event: TurnRecorded, delivery: Delivery | None) -> Outcome:
        published_at = delivery.publish_time if delivery is not None else None
        enrolled = self.archiver.enroll(event, published_at)
        for request in enrolled.requests:
            self.request(request)
        return enrolled.outcome

    def handle_request(self, event: ExtractionRequested, delivery: Delivery | None) -> Outcome:
        session = WindowKey(event.app, event.user_id, event.session_id)
        if event.reason in CLOSING:
            # A flush, or the user's next session: close the session's window now.
            through = delivery.publish_time if delivery and delivery.publish_time else None
            if not self._close(event, session, through or event.created_at):
                return Outcome.DROPPED if self._deleted(event) else Outcome.APPLIED
        # The turns its window closed with, its id this request's.
        return self.windows.extract(session, event.event_id)

    def _close(self, event: ExtractionRequested, session: WindowKey, through: datetime) -> bool:
        """Under the user's lock (so that a turn committing meanwhile either is counted
        here or sees the mark): turns of the session published up to `through` and
        still in flight close their window as soon as they arrive; the open window
        closes now as this request's, unless turns the flush counted are still on
        their way (the agent flushed right after recording them): then the first to
        arrive closes it with all that waits. False: nothing closed now."""
        with user_transaction(self.units, event.app, event.user_id) as uow:
            if uow.tombstones.covers(event.app, event.user_id, event.created_at):
                return False  # a request of a user deleted since: nothing to keep
            uow.windows.mark_flush(session, through)
            archived = uow.episodes.count_session(event.app, event.user_id, event.session_id)
            if archived >= event.turns:
                uow.windows.close(session, event.event_id)
        if archived < event.turns:
            log.info(
                "flush waits for turns", session=event.session_id, missing=event.turns - archived
            )
            return False
        return True

    def _deleted(self, event: ExtractionRequested) -> bool:
        with self.units() as uow:
            return uow.tombstones.covers(event.app, event.user_id, event.created_at)

    def handle_generate(self, event: MemoriesGenerate, delivery: Delivery | None) -> Outcome:
        source = Source(
            event.app,
            event.user_id,
            event.project_id,
            event.session_id,
            event.created_at,
            event.event_id,
            agent_id=event.agent_id,
        )
        with self.units() as uow:
            seen = peeked(uow.ledger, GENERATE_SUBSCRIPTION, event)
        if seen is Outcome.DUPLICATE:
            return Outcome.DUPLICATE
        user = "\n".join(e.text for e in event.events if e.role == "user")
        assistant = "\n".join(e.text for e in event.events if e.role != "user")
        inp = ExtractionInput.single(
            event.session_id, event.project_id, "", event.created_at, user, assistant
        )

        def plan() -> tuple[list[Planned], list[Update]]:
            # A deleted user's text must not reach the model: the claim drops it.
            if seen is Outcome.DROPPED:
                return [], []
            sources = {"turn": source}
            return self.planner.plan(inp, sources), self.planner.plan_profile(inp, sources)

        def write(
            uow: UnitOfWork, plans: tuple[list[Planned], list[Update]]
        ) -> tuple[Outcome, list[Applied]]:
            stop = claimed(uow.ledger, GENERATE_SUBSCRIPTION, event)
            if stop is not None:
                return stop, []
            planned, profile = plans
            fusion = Fusion.from_settings(self.settings)
            verify(uow, planned, fusion, self.settings.consolidation_neighbours)
            applied = apply(uow, planned)
            if profile:
                apply_updates(uow, event.app, event.user_id, profile)
            uow.operations.complete(
                event.operation, {"generated_memories": operation_result(applied)}
            )
            return Outcome.APPLIED, applied

        outcome, applied = write_for_user(
            self.units,
            event.app,
            event.user_id,
            self.settings.write_attempts,
            "the user's memories",
            plan,
            write,
        )
        if outcome is Outcome.APPLIED:
            log.info("memories generated", actions=[a.action.value for a in applied])
        return outcome


def operation_result(applied: list[Applied]) -> list[dict[str, Any]]:
    """What `GET /v1/operations/{name}` reports: each memory with its action."""
    result = []
    for a in applied:
        if a.memory is None or a.action in (Action.NONE, Action.HISTORY):
            continue
        result.append({"action": a.action, "memory": {**a.memory.identity(), "text": a.text}})
    return result


def fail_operation(units: Units, letter: DeadLetterNotice) -> None:
    """A generate request that goes to the dead letters ends its operation with the
    reason, so that no client waits on it forever (a replay that succeeds later
    sets its result). Read from the raw body when the event could not be decoded."""
    name, app = "", letter.attributes.get("app", "")
    if isinstance(letter.event, MemoriesGenerate):
        name, app = letter.event.operation, letter.event.app
    else:
        with contextlib.suppress(ValueError, AttributeError):
            body = json.loads(letter.data)
            name, app = str(body.get("operation", "")), str(body.get("app", app))
    if not name.startswith("operations/"):
        return
    with units() as uow:
        uow.operations.fail_pending(name, app, f"dead-lettered: {letter.reason}")
        uow.commit()


def publishing(publisher: EventPublisher, settings: Settings) -> Request:
    def publish(request: ExtractionRequested) -> None:
        publisher.publish(request).result(timeout=settings.publish_timeout_seconds)

    return publish


def _units(resources: Resources) -> Units:
    assert resources.pool is not None
    return UnitsOfWork(resources.pool, "extraction")


def dead_letter_hooks(resources: Resources) -> dict[type, DeadLetterHook]:
    assert resources.publisher is not None
    units = _units(resources)
    return {
        MemoriesGenerate: partial(fail_operation, units),
        ExtractionRequested: partial(
            dead_letter_window, units, resources.publisher, resources.settings
        ),
    }


def handlers(resources: Resources) -> dict[type, Callable[..., Outcome]]:
    """The handler of each event type this worker's subscriptions carry."""
    assert resources.llm is not None and resources.embedder is not None
    assert resources.publisher is not None
    extraction = Extraction(
        _units(resources),
        resources.llm,
        resources.embedder,
        resources.settings,
        publishing(resources.publisher, resources.settings),
    )
    return {
        TurnRecorded: extraction.handle_turn,
        ExtractionRequested: extraction.handle_request,
        MemoriesGenerate: extraction.handle_generate,
    }
