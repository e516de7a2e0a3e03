"""What every LLM provider offers, and the types it speaks in.

A provider does tasks (summarize, compact, extract, fill a profile, consolidate,
decompose), not raw
prompts, so the `offline` provider can do the same tasks
deterministically. Every call reports the tokens it spent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

from shared.entities.judging import Judgement, Listing
from shared.entities.names import Mention
from shared.errors import DependencyError, PermanentError
from shared.llm.topics import ALL_TOPICS, Topics
from shared.profiles.schema import ProfileField

T = TypeVar("T")

SUMMARY_INSTRUCTION = (
    "You maintain the rolling summary of a conversation between a user and an AI "
    "assistant. Fold the new turns into the previous summary. Retain key "
    "constraints, user choices, technical decisions and ongoing goals; drop "
    "greetings, filler and anything already superseded. Write plain sentences in "
    "the third person ('The user ...'). Stay within {max_tokens} tokens."
)


KINDS = ("preference", "fact", "rule", "event")
SCOPES = ("global", "project", "session")


class Action(StrEnum):
    """What consolidation does with a candidate memory (also the revision's action)."""

    CREATED = "CREATED"
    UPDATED = "UPDATED"
    DELETED = "DELETED"
    NONE = "NONE"  # a duplicate: nothing written
    # An observation older than what the memory knows: written to its history only.
    HISTORY = "HISTORY"


# What a model may decide (HISTORY is consolidation's own answer, never a model's).
ACTIONS = tuple(a.value for a in (Action.CREATED, Action.UPDATED, Action.DELETED, Action.NONE))


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


@dataclass(frozen=True)
class ExtractionTurn:
    """One turn for extraction: only the texts, never tool calls or their outputs."""

    turn_id: str
    project_id: str  # the turn's project, "" if none
    observed_at: datetime
    user: str
    assistant: str


@dataclass(frozen=True)
class ExtractionInput:
    """A window of one session's turns, oldest first, extracted in one call."""

    session_id: str
    prev_session_id: str  # "" if none
    turns: tuple[ExtractionTurn, ...]
    topics: Topics = ALL_TOPICS  # what the app keeps
    profile: tuple[ProfileField, ...] = ()  # the fields of the app's profile schema
    # The known entities the turns' names may be, for the model to judge (a model
    # provider's: `LLM.judges_entities`).
    entities: Listing = Listing()

    @classmethod
    def single(
        cls,
        session_id: str,
        project_id: str,
        prev_session_id: str,
        observed_at: datetime,
        user: str,
        assistant: str,
        turn_id: str = "turn",
    ) -> ExtractionInput:
        """A window of one turn."""
        turn = ExtractionTurn(turn_id, project_id, observed_at, user, assistant)
        return cls(session_id, prev_session_id, (turn,))


@dataclass(frozen=True)
class Candidate:
    """A memory the LLM proposes, before consolidation."""

    entity_name: str  # short normalised key of what it is about, e.g. "ui theme"
    kind: str  # one of KINDS
    scope: str  # one of SCOPES
    project_id: str  # "" unless scope == "project"
    text: str  # one self-contained third-person sentence
    topic: str = ""  # the extraction topic it belongs to (shared.llm.topics)
    # The entities the model says it names (a model provider's; the rules of
    # shared.entities.names read the text's own in every case).
    entities: tuple[Mention, ...] = ()
    # The model's word on which of the listed known entities a name is, or is not.
    judgements: tuple[Judgement, ...] = ()


@dataclass(frozen=True)
class Found:
    """A candidate and the turn of the window that states it."""

    turn_id: str
    candidate: Candidate


@dataclass(frozen=True)
class ProfileFound:
    """A value of a profile field that a turn of the window states, as text (the
    writer reads it as the field's type)."""

    turn_id: str
    field: str
    value: str


@dataclass(frozen=True)
class ExistingMemory:
    """A live memory a candidate is weighed against."""

    id: str
    entity_name: str
    kind: str
    scope: str
    project_id: str
    text: str


@dataclass(frozen=True)
class Weighing:
    """A candidate and the live memories it is weighed against (its user's, scope's
    and project's most similar ones): the only memories it may change."""

    candidate: Candidate
    existing: tuple[ExistingMemory, ...]


@dataclass(frozen=True)
class Decision:
    """What to do with a candidate. `target_id` is one of the `existing` ids (the
    memory updated, retired or duplicated), None for CREATED; `text` is the text to
    store (CREATED) or the merged text (UPDATED), "" otherwise."""

    action: Action  # one of ACTIONS
    target_id: str | None
    text: str


class Fault(StrEnum):
    """What is wrong with a model's answer (the `fault` label of
    `agent_memory_llm_invalid_answers_total`)."""

    EMPTY = "empty"  # no text at all
    NOT_JSON = "not_json"
    OFF_SCHEMA = "off_schema"  # JSON, but a field is missing or of the wrong type
    UNKNOWN_VALUE = "unknown_value"  # a value the schema's enum does not have
    UNKNOWN_ID = "unknown_id"  # a turn, candidate or memory the request did not name
    TRUNCATED = "truncated"  # cut at the output token limit


class MalformedReply(Exception):
    """The model answered, but not with what the task needs (asked again, with this
    error, a bounded number of times)."""

    def __init__(self, message: str, fault: Fault = Fault.OFF_SCHEMA) -> None:
        super().__init__(message)
        self.fault = fault


class LLMError(Exception):
    """The provider gave no usable answer: retries ran out, or the request was refused.
    Transient for the message that caused it (nack, then dead-letter after attempts)."""


class InvalidAnswer(LLMError, PermanentError):
    """The model's answers stayed invalid after `AM_LLM_ANSWER_RETRIES` more tries,
    each told what was wrong: the event is dead-lettered at once with this reason,
    which names the fault and holds the start of the last answer."""

    def __init__(self, message: str, fault: Fault) -> None:
        super().__init__(message)
        self.fault = fault


class LLMUnavailable(LLMError, DependencyError):
    """The LLM endpoint did not answer, kept failing or rate-limiting until the
    retries ran out, or refused our credentials: the provider's fault, not the
    event's (the worker holds the message until the endpoint answers)."""

    def __init__(self, message: str) -> None:
        DependencyError.__init__(self, "llm", message)


class LLMRateLimited(LLMUnavailable):
    """The endpoint kept refusing for quota (429, RESOURCE_EXHAUSTED) until the
    retries ran out. A quota says nothing about the event, and a probe may pass
    while it lasts: the worker holds the message however long it takes."""


class LLM(Protocol):
    name: str
    # Whether its extraction judges which known entity a name is
    # (`ExtractionInput.entities`): a model's can, the offline rules' cannot.
    judges_entities: bool

    def summarize(
        self, previous: str, turns: list[DialogueTurn], max_tokens: int
    ) -> Completion[str]:
        """The previous summary with `turns` folded in, at most `max_tokens` tokens."""
        ...

    def compact(
        self, previous: str, episodes: list[DialogueTurn], max_tokens: int
    ) -> Completion[str]:
        """The user's long-term compacted summary: `previous` (the summary so far, "" for
        none) with old `episodes` (oldest first) folded in. Nothing `previous` holds may
        be lost (docs/design.md, "Compaction"): the bound is `max_tokens`, or the previous
        summary's own size when that is larger."""
        ...

    def extract(self, inp: ExtractionInput) -> Completion[list[Found]]:
        """The memories worth keeping that the window's turns state (none for
        chatter), each with the turn that states it, in the turns' order."""
        ...

    def fill_profile(self, inp: ExtractionInput) -> Completion[list[ProfileFound]]:
        """The values of `inp.profile`'s fields that the turns state, each with the
        turn that states it (none when they state none)."""
        ...

    def consolidate(self, weighings: list[Weighing]) -> Completion[list[Decision]]:
        """For each candidate, in order: create, update, retire or skip, against its
        own existing memories. DELETED: the candidate revokes the target. One call
        decides every candidate of a window."""
        ...

    def decompose(self, query: str, session_id: str, prev_session_id: str) -> Completion[list[str]]:
        """1..4 single-topic sub-queries, with session references made explicit."""
        ...


def render_turns(turns: list[DialogueTurn]) -> str:
    lines = []
    for turn in turns:
        lines.append(f"[{turn.created_at.isoformat(timespec='seconds')}] User: {turn.user}")
        lines.append(f"Assistant: {turn.assistant}")
    return "\n".join(lines)
