"""The fact a memory's text states about an entity, read as one clause (subject,
predicate, value: `shared.llm.offline.clauses`, the same reading the offline
consolidator uses), and the valid-time rule that keeps facts over time.

"Dana moved to Berlin." → (Dana, location, Berlin); "Dana's manager is Priya."
→ (Dana, manager, Priya): a subject longer than the entity's name puts its other
words in front of the predicate. The object is an entity when the value names
one the memory mentions, else a plain value. A text about the user ("User lives
in Berlin") or with no clause states no fact: the memory itself says it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from shared.entities.names import normalise
from shared.llm.offline.clauses import parse


@dataclass(frozen=True)
class Stated:
    """A fact as a text states it: entity ids from `named` (normalised name → id)."""

    subject_id: str
    predicate: str
    object_id: str | None
    value: str
    single: bool
    negated: bool


def stated(text: str, named: dict[str, str]) -> Stated | None:
    """The fact `text` states about one of the entities it `named`, if any."""
    clause = parse(text)
    if clause is None:
        return None
    subject = normalise(clause.subject)
    words = subject.split()
    for size in range(len(words), 0, -1):
        head = " ".join(words[:size])
        if head in named:
            rest = " ".join(words[size:])
            break
    else:
        return None
    predicate = clause.predicate
    if rest:
        predicate = rest if predicate == "be" else f"{rest} {predicate}"
    value = normalise(clause.value)
    object_id = named.get(value)
    if object_id is None:
        object_id = next((i for name, i in named.items() if name != head and name in value), None)
    return Stated(named[head], predicate, object_id, value, clause.single, clause.negated)


@dataclass(frozen=True)
class Held:
    """A fact already recorded, as the valid-time rule reads it."""

    id: str
    value: str
    valid_from: datetime
    valid_to: datetime | None


@dataclass(frozen=True)
class Timed:
    """What recording a new fact at `valid_from` does: the new fact's end
    (`valid_to`: None while still true, or the start of a newer fact it must not
    outlast), and the recorded facts that end at its `valid_from`."""

    valid_to: datetime | None
    closes: tuple[str, ...]
    same: str | None  # an open fact of the same value: nothing new to record


def timed(valid_from: datetime, single: bool, held: list[Held], value: str) -> Timed:
    """The valid-time rule for a fact of a subject and predicate against the facts
    `held` of the same: a fact of one value at a time closes the open older one of
    another value at its own start; a late fact (older than a recorded one) never
    closes the newer, it ends where the newer begins."""
    same = next(
        (
            h.id
            for h in held
            if h.value == value and h.valid_to is None and h.valid_from <= valid_from
        ),
        None,
    )
    if same is not None or not single:
        return Timed(None, (), same)
    newer = [h.valid_from for h in held if h.valid_from > valid_from]
    ends = min(newer) if newer else None
    # Any other value that held at `valid_from` ends there (a late fact also cuts
    # short an older one that a newer fact had closed later).
    closes = tuple(
        h.id
        for h in held
        if h.value != value
        and h.valid_from <= valid_from
        and (h.valid_to is None or h.valid_to > valid_from)
    )
    return Timed(ends, closes, None)
