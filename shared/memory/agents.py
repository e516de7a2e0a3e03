"""Agents: whose memories an agent reads, and whose a memory it learns becomes.

A memory belongs to one agent of its user (`agent_id`), or to none: then it is
the user's, shared with every agent of the user. A read that names an agent sees
that agent's memories and the user's; a read that names none sees the user's
only (what every read saw before agents existed). A memory extracted from an
agent's turns is the agent's, unless the app shares its kind or its topic
(`PUT /v1/config/agents`): then it is the user's. A direct write names its owner
itself. The empty agent id is "no agent" everywhere, as the empty project is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

AGENTS_SETTING = "agents"
NO_AGENT = ""


@dataclass(frozen=True)
class Sharing:
    """What an app's agents learn for the user rather than for themselves: memories
    of these kinds or these topics. Nothing by default: an agent keeps to itself
    what it learns until the app says otherwise."""

    kinds: tuple[str, ...] = ()
    topics: tuple[str, ...] = ()

    def shares(self, kind: str, topic: str) -> bool:
        return kind in self.kinds or (bool(topic) and topic in self.topics)


NOTHING_SHARED = Sharing()


def of_setting(value: dict[str, Any] | None) -> Sharing:
    """The sharing an app's stored setting names (validated when it was put)."""
    if value is None:
        return NOTHING_SHARED
    return Sharing(tuple(value.get("shared_kinds", [])), tuple(value.get("shared_topics", [])))


def owner(agent_id: str, kind: str, topic: str, sharing: Sharing) -> str:
    """Whose a memory of `kind` and `topic` that agent `agent_id` learnt becomes: the
    agent's, or the user's (`NO_AGENT`) when the app shares that kind or topic."""
    return NO_AGENT if sharing.shares(kind, topic) else agent_id


def visible_to(agent_id: str) -> tuple[str, ...]:
    """The owners whose memories a read as `agent_id` sees: its own and the user's."""
    return (agent_id, NO_AGENT) if agent_id else (NO_AGENT,)
