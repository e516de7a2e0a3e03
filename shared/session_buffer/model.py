"""What the session buffer holds and what its operations answer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from shared.events import TurnRecorded, format_time, parse_time
from shared.tokens import estimate_tokens


@dataclass(frozen=True)
class BufferedTurn:
    turn_id: str
    event_id: str
    created_at: datetime
    user: str
    assistant: str
    project_id: str
    tokens: int
    agent_id: str = ""  # the agent that recorded it ('' none: the user's own)

    @classmethod
    def from_event(cls, event: TurnRecorded) -> BufferedTurn:
        return cls(
            turn_id=event.turn_id,
            event_id=event.event_id,
            created_at=event.created_at,
            user=event.user,
            assistant=event.assistant,
            project_id=event.project_id,
            tokens=estimate_tokens(event.user) + estimate_tokens(event.assistant),
            agent_id=event.agent_id,
        )

    def to_json(self) -> str:
        fields: dict[str, Any] = {
            "turn_id": self.turn_id,
            "event_id": self.event_id,
            "created_at": format_time(self.created_at),
            "user": self.user,
            "assistant": self.assistant,
            "project_id": self.project_id,
            "tokens": self.tokens,
        }
        if self.agent_id:
            fields["agent_id"] = self.agent_id
        return json.dumps(
            fields,
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: str | bytes) -> BufferedTurn:
        d: dict[str, Any] = orjson.loads(raw)
        return cls(
            turn_id=d["turn_id"],
            event_id=d["event_id"],
            created_at=parse_time(d["created_at"]),
            user=d["user"],
            assistant=d["assistant"],
            project_id=d["project_id"],
            tokens=int(d["tokens"]),
            agent_id=d.get("agent_id", ""),
        )


@dataclass(frozen=True)
class Summary:
    """The session's rolling summary; version 0 means none yet."""

    text: str = ""
    version: int = 0
    updated_at: datetime | None = None

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text)


@dataclass(frozen=True)
class SessionView:
    turns: list[BufferedTurn]
    tokens: int  # of the turns in the buffer
    turns_total: int  # every turn ever appended (the `seen` set), folded ones included
    summary: Summary
    prev_session_id: str = ""
    # The agent whose session it is ('' the user's own; None: no turn says yet).
    agent_id: str | None = None
    # Summary version -> the turn_ids folded into that version (read on request).
    folds: dict[int, list[str]] = field(default_factory=dict)

    def serves(self, agent_id: str) -> bool:
        """May `agent_id` ('' none) read and write this session: it is the agent's,
        or no turn has said whose it is (a new session, or one older than owners)."""
        return self.agent_id is None or self.agent_id == agent_id

    @property
    def folded_total(self) -> int:
        """Turns folded into the summary: every turn leaves the buffer only by a fold."""
        return self.turns_total - len(self.turns)


@dataclass(frozen=True)
class FoldResult:
    version: int  # the new summary version, or FOLD_VERSION_MOVED / FOLD_TURN_GONE
    turn_count: int  # turns in the buffer after the attempt
    tokens: int  # their tokens


@dataclass(frozen=True)
class AppendResult:
    added: bool  # False: this turn_id was appended before (now in the buffer or folded)
    turn_count: int  # turns in the buffer after the append
    tokens: int  # their tokens
    # The user was deleted (GDPR) after this turn was created: the session's keys
    # were removed again and nothing is kept.
    dropped: bool = False
    # Refused: the session is another agent's (asked for with `own_only`); nothing
    # was appended.
    other_agent: bool = False


class SessionOfAnotherAgent(Exception):
    """The session is another agent's (or an agent's, asked for as the user's own)."""

    def __init__(self, session_id: str, agent_id: str) -> None:
        who = f"agent {agent_id}" if agent_id else "the user (no agent_id)"
        super().__init__(f"session {session_id} is not a session of {who}")
        self.session_id = session_id
        self.agent_id = agent_id
