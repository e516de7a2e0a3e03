"""Memories, search results and the context as the response models lay them out.

The `*_fields` and `context_body` functions give plain data for the routes on
the fast path of services.api.models.json_response (a test checks their bodies
against the models); the others build the models.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.api.memory_models import (
    ContextTurnView,
    EpisodeView,
    MemoryDetail,
    MemoryView,
    PeriodView,
    RevisionView,
)
from shared.db.context_reads import Cited
from shared.db.entity_reads import MemoryLinks
from shared.db.memory_rows import MemoryRow, Revision
from shared.events import format_time
from shared.memory.context import Context, RecalledTurn, SessionSummary
from shared.memory.periods import Period
from shared.memory.search import Found, FoundEpisode


def _time(value: datetime | None) -> str | None:
    return format_time(value) if value is not None else None


def memory_fields(m: MemoryRow) -> dict[str, Any]:
    """A memory as `MemoryView` lays it out, as plain data."""
    return {
        **m.identity(),
        "text": m.text,
        "observed_at": format_time(m.observed_at),
        "created_at": format_time(m.created_at),
        "updated_at": format_time(m.updated_at),
        "deleted_at": _time(m.valid_to),
        "expire_at": _time(m.expire_at),
        "topic": m.topic,
        "metadata": m.metadata,
    }


def memory_view(m: MemoryRow) -> MemoryView:
    return MemoryView(**memory_fields(m))


def found_fields(found: Found) -> dict[str, Any]:
    """A ranked memory as `ScoredMemory` lays it out, as plain data."""
    return {
        **memory_fields(found.memory),
        "score": round(found.ranked.score, 6),
        "rankers": found.ranked.rankers,
    }


def fact_fields(row: dict[str, Any]) -> dict[str, Any]:
    """A fact row as `FactView` lays it out."""
    return {**row, "valid_from": format_time(row["valid_from"]), "valid_to": _time(row["valid_to"])}


def memory_detail(memory: MemoryRow, revisions: list[Revision], links: MemoryLinks) -> MemoryDetail:
    """The memory with its revisions, the entities it mentions and the facts it states."""
    return MemoryDetail(
        **memory_fields(memory),
        entities=[{**e, "project_id": e["project_id"] or None} for e in links.entities],
        facts=[fact_fields(f) for f in links.facts],
        revisions=[
            RevisionView(
                revision=number,
                action=r.action,
                old_text=r.old_text,
                new_text=r.new_text,
                event_id=r.event_id,
                observed_at=format_time(r.observed_at),
                applied=r.applied,
                created_at=format_time(r.created_at),
                source=r.source,
                metadata=(r.state or {}).get("metadata"),
            )
            for number, r in enumerate(revisions, start=1)
        ],
    )


def episode_view(found: FoundEpisode, around: list[dict[str, Any]] | None = None) -> EpisodeView:
    fields = found.fields
    context = [
        ContextTurnView(
            id=t["id"],
            turn_id=t["turn_id"],
            created_at=format_time(t["created_at"]),
            text=t["text"],
            offset=t["offset"],
        )
        for t in around or []
    ]
    return EpisodeView(
        id=fields["id"],
        turn_id=fields["turn_id"],
        session_id=fields["session_id"],
        project_id=fields["project_id"] or None,
        created_at=format_time(fields["created_at"]),
        text=fields["text"],
        score=round(found.ranked.score, 6),
        rankers=found.ranked.rankers,
        context=context,
    )


def period_view(period: Period) -> PeriodView:
    return PeriodView(
        phrase=period.phrase, start=format_time(period.start), end=format_time(period.end)
    )


def _summary(summary: SessionSummary | None) -> dict[str, Any] | None:
    if summary is None:
        return None
    return {"session_id": summary.session_id, "text": summary.text, "version": summary.version}


def _cited(memory_id: str, cited: dict[str, Cited]) -> dict[str, Any]:
    """Where a memory of the context comes from, as `Citation` lays it out."""
    found = cited.get(memory_id, Cited(0))
    return {
        "revision": found.revision,
        "sources": [
            {
                "turn_id": t.turn_id,
                "session_id": t.session_id,
                "created_at": format_time(t.created_at),
            }
            for t in found.sources
        ],
    }


def _recalled(turn: RecalledTurn) -> dict[str, Any]:
    return {
        "id": turn.id,
        "turn_id": turn.turn_id,
        "session_id": turn.session_id,
        "project_id": turn.project_id or None,
        "created_at": format_time(turn.created_at),
        "text": turn.text,
        "score": turn.score,
        "rankers": list(turn.rankers),
        "neighbour_of": turn.neighbour_of,
    }


def context_body(context: Context) -> dict[str, Any]:
    """The context as `ContextResponse` lays it out, as plain data."""
    cited = context.cited
    return {
        "rolling_summary": _summary(context.rolling),
        "carried_summary": _summary(context.carried),
        "recent_turns": [
            {
                "turn_id": t.turn_id,
                "created_at": format_time(t.created_at),
                "user": t.user,
                "assistant": t.assistant,
            }
            for t in context.turns
        ],
        "pinned_rules": [{**memory_fields(m), **_cited(m.id, cited)} for m in context.rules],
        "profile": {row.field: row.value for row in context.profile},
        "memories": [{**found_fields(f), **_cited(f.memory.id, cited)} for f in context.memories],
        "long_term_summaries": [
            {
                **memory_fields(f.memory),
                **_cited(f.memory.id, cited),
                "score": round(f.ranked.score, 6) if f.ranked is not None else None,
            }
            for f in context.summaries
        ],
        "recalled_turns": [_recalled(t) for t in context.recalled],
        "period": period_view(context.period).model_dump() if context.period else None,
        "system_instruction": context.built.text,
        "tokens": context.built.tokens,
        "tokens_by_section": context.built.by_section,
        "omitted": context.built.omitted,
        "degraded": context.degraded,
    }
