"""What every LLM provider offers, and the types it speaks in.

A provider does tasks (`summarize` now; extraction and consolidation later), not
raw prompts, so the offline `rules` provider can do the same tasks
deterministically. Every call reports the tokens it spent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")

SUMMARY_INSTRUCTION = (
    "You maintain the rolling summary of a conversation between a user and an AI "
    "assistant. Fold the new turns into the previous summary. Retain key "
    "constraints, user choices, technical decisions and ongoing goals; drop "
    "greetings, filler and anything already superseded. Write plain sentences in "
    "the third person ('The user ...'). Stay within {max_tokens} tokens."
)


@dataclass(frozen=True)
class Usage:
    """Tokens spent by one task, over all of its attempts."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


@dataclass(frozen=True)
class Completion(Generic[T]):
    value: T
    usage: Usage
    attempts: int = 1


@dataclass(frozen=True)
class DialogueTurn:
    """One turn as the LLM sees it: the two texts, never tool calls or outputs."""

    turn_id: str
    created_at: datetime
    user: str
    assistant: str


class LLMError(Exception):
    """The provider gave no usable answer: retries ran out, or the request was refused.
    Transient for the message that caused it (nack, then dead-letter after attempts)."""


class LLM(Protocol):
    name: str

    def summarize(
        self, previous: str, turns: list[DialogueTurn], max_tokens: int
    ) -> Completion[str]:
        """The previous summary with `turns` folded in, at most `max_tokens` tokens."""
        ...


def render_turns(turns: list[DialogueTurn]) -> str:
    lines = []
    for turn in turns:
        lines.append(f"[{turn.created_at.isoformat(timespec='seconds')}] User: {turn.user}")
        lines.append(f"Assistant: {turn.assistant}")
    return "\n".join(lines)
