"""Handlers of the extraction worker: turns and generate requests become episodes
and consolidated memories.

For each event: ask the LLM for candidates (outside any transaction: it needs no
database state and may take seconds), embed the candidates in one batch, then in
ONE transaction that holds the user's advisory lock: the ledger row,
consolidation of each candidate (memories and revisions), and the episode with
its search key and its neighbours' (`Episodes.archive`). Either all of it
commits or none of it, and a redelivery does it again from the start; the ledger
makes a second commit impossible.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog
from psycopg_pool import ConnectionPool

from shared.bootstrap import Resources
from shared.bus.worker import DeadLetter, DeadLetterHook, Delivery, HandlerTable, Outcome
from shared.config import Settings
from shared.db.episodes import Episode
from shared.db.ledger import Claim, Ledger
from shared.db.operations import Operations
from shared.db.unit_of_work import UnitOfWork
from shared.events import MemoriesGenerate, TurnRecorded
from shared.llm.base import Action, ExtractionInput
from shared.memory.consolidate import Applied, Consolidator, Source, correct, new_memory
from shared.memory.search import Fusion

log = structlog.get_logger("agent_memory.extraction")

TURNS_CONSUMER = "turns-extraction"
GENERATE_CONSUMER = "memory-generate-extraction"


@dataclass
class Extraction:
    pool: ConnectionPool
    llm: Any
    embedder: Any
    settings: Settings

    def handle_turn(self, event: TurnRecorded, delivery: Delivery) -> Outcome:
        seen = self._seen(TURNS_CONSUMER, event)
        if seen is not None:
            return seen
        source = _source(event)
        episode = Episode(
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
        inp = ExtractionInput(
            session_id=event.session_id,
            project_id=event.project_id,
            prev_session_id=event.prev_session_id,
            observed_at=event.created_at,
            user=event.user,
            assistant=event.assistant,
        )
        return self._consolidate(TURNS_CONSUMER, source, [inp], episode)

    def handle_generate(self, event: MemoriesGenerate, delivery: Delivery) -> Outcome:
        seen = self._seen(GENERATE_CONSUMER, event)
        if seen is not None:
            return seen
        source = _source(event)
        user = "\n".join(e.text for e in event.events if e.role == "user")
        assistant = "\n".join(e.text for e in event.events if e.role != "user")
        inp = ExtractionInput(
            session_id=event.session_id,
            project_id=event.project_id,
            prev_session_id="",
            observed_at=event.created_at,
            user=user,
            assistant=assistant,
        )
        return self._consolidate(GENERATE_CONSUMER, source, [inp], None, event.operation)

    # -- the steps ------------------------------------------------------------
    def _seen(self, consumer: str, event: TurnRecorded | MemoriesGenerate) -> Outcome | None:
        """Already applied, or its user deleted since? Saves the LLM and embedding calls
        (a deleted user's text must not reach them); the transaction decides for good."""
        with self.pool.connection() as conn:
            seen = Ledger(conn).peek(
                consumer,
                event.event_id,
                app=event.app,
                user_id=event.user_id,
                created_at=event.created_at,
            )
        if seen is Claim.DUPLICATE:
            return Outcome.DUPLICATE
        if seen is Claim.DELETED:
            # Ledgered and dropped in the transaction, with nothing extracted.
            return self._consolidate(consumer, _source(event), [], None)
        return None

    def _consolidate(
        self,
        consumer: str,
        source: Source,
        inputs: list[ExtractionInput],
        episode: Episode | None,
        operation: str | None = None,
    ) -> Outcome:
        candidates = []
        for inp in inputs:
            candidates += [correct(c, source) for c in self.llm.extract(inp).value]
        texts = [c.text for c in candidates]
        vectors = self.embedder.embed(texts) if texts else []
        fusion = Fusion.from_settings(self.settings)
        with UnitOfWork(self.pool) as uow:
            claim = uow.ledger.claim_or_skip(
                consumer,
                source.event_id or "",
                app=source.app,
                user_id=source.user_id,
                created_at=source.observed_at,
            )
            if claim is Claim.DUPLICATE:
                return Outcome.DUPLICATE
            if claim is Claim.DELETED:
                # A late, retried or replayed event of a user deleted since: the
                # ledger row is all it leaves.
                uow.commit()
                return Outcome.DROPPED
            consolidator = Consolidator(
                uow, self.llm, fusion, self.settings.consolidation_neighbours
            )
            applied = [
                consolidator.apply(new_memory(c, source, vector), source)
                for c, vector in zip(candidates, vectors, strict=False)
            ]
            if episode is not None:
                # Its key holds its neighbours', read in this transaction: embedded here.
                uow.episodes.archive(
                    episode,
                    self.embedder.embed,
                    self.settings.episode_key_window,
                    self.settings.episode_key_dated,
                )
            if operation is not None:
                uow.operations.complete(
                    operation, {"generated_memories": operation_result(applied)}
                )
            uow.commit()
        log.info(
            "memories consolidated",
            event_id=source.event_id,
            actions=[a.action.value for a in applied],
        )
        return Outcome.APPLIED


def _source(event: TurnRecorded | MemoriesGenerate) -> Source:
    return Source(
        event.app,
        event.user_id,
        event.project_id,
        event.session_id,
        event.created_at,
        event.event_id,
    )


def operation_result(applied: list[Applied]) -> list[dict[str, Any]]:
    """What `GET /v1/operations/{name}` reports: each memory with its action."""
    result = []
    for a in applied:
        if a.memory is None or a.action in (Action.NONE, Action.HISTORY):
            continue
        result.append({"action": a.action, "memory": {**a.memory.identity(), "text": a.text}})
    return result


def fail_operation(pool: ConnectionPool, letter: DeadLetter) -> None:
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
    with pool.connection() as conn:
        Operations(conn).fail_pending(name, app, f"dead-lettered: {letter.reason}")


def dead_letter_hooks(resources: Resources) -> dict[str, DeadLetterHook]:
    assert resources.pool is not None
    return {GENERATE_CONSUMER: partial(fail_operation, resources.pool)}


def handlers(resources: Resources) -> dict[str, HandlerTable]:
    """The handler table of each subscription this worker consumes."""
    assert resources.pool is not None and resources.llm is not None
    assert resources.embedder is not None
    extraction = Extraction(resources.pool, resources.llm, resources.embedder, resources.settings)
    return {
        "turns-extraction": {TurnRecorded: [extraction.handle_turn]},
        "memory-generate-extraction": {MemoriesGenerate: [extraction.handle_generate]},
    }
