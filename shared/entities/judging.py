"""The model's judgement in resolution: which known entities a name of a window's
turns may be when the rules cannot be sure (`listing`, what the extraction
prompt of a model provider shows), and a mention resolved with what the model
answered about it (`resolve_judged`).

A name is in doubt when no single entity has it as a sure alias (its own name, a
nickname's or a merge's; not one taken by a first name, a full name, a similar
spelling or an earlier judgement, which held for one mention in its context:
`resolution.UNSURE`) and some entity of an agreeing kind is near it: an alias
that shares a word with it, starts like one of its words, is a nickname form of
its first word, or is spelt near it. "Dana" with "Dana Lee"
and "Dana Smith" known; "Beth Taylor" with "Liz Taylor" known. An entity the
window's own turns made (first seen at or after its first turn) is no reason
for certainty: its turn was archived, and resolved by the rules, before the
model was asked.

The list is bounded (`MOST_PER_NAME` entities for a name, `MOST_LISTED` in one
prompt) and holds only the entities of the partitions the window's memories
can land in (the user's own, and each turn's project). What the model answers
is checked again where it is written, under the user's lock: an entity that is
not the memory's partition's (another project's, merged meanwhile) is ignored.
Pure code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from shared.entities.names import Mention, normalise
from shared.entities.resolution import (
    Known,
    Resolved,
    kinds_agree,
    nickname_forms,
    resolve,
    similar_names,
)

MOST_PER_NAME = 3
MOST_LISTED = 8
# A word this long that starts another ("Alex", "Alexandra") makes two names near.
PREFIX_LENGTH = 3


@dataclass(frozen=True)
class Listed:
    """A known entity the prompt shows, by its label (`e1`)."""

    label: str
    entity: Known
    project_id: str  # its partition: '' the user's own


@dataclass(frozen=True)
class Doubt:
    """A name of the turns and the labels of the entities it may be."""

    name: str
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Listing:
    """The entities a window's names may be, for the model to judge."""

    entities: tuple[Listed, ...] = ()
    doubts: tuple[Doubt, ...] = ()

    def by_label(self) -> dict[str, Listed]:
        return {listed.label: listed for listed in self.entities}

    def labels_of(self, name: str) -> tuple[str, ...]:
        """The labels listed for `name` (compared normalised); () if it is not listed."""
        key = normalise(name)
        return next((d.labels for d in self.doubts if normalise(d.name) == key), ())


@dataclass(frozen=True)
class Judgement:
    """The model's word on a name: the entity it is (`same_as`, an id the listing
    holds), or the entities it is none of (`distinct_from`)."""

    name: str
    same_as: str | None = None
    distinct_from: tuple[str, ...] = ()


def near(key: str, entity: Known) -> bool:
    """Is the normalised name `key` near one of the entity's aliases?"""
    words = key.split()
    forms = nickname_forms(words[0]) if words else frozenset()
    for alias in entity.aliases:
        theirs = alias.split()
        if set(words) & set(theirs) or forms & set(theirs[:1]) or similar_names(key, alias):
            return True
        if any(
            min(len(a), len(b)) >= PREFIX_LENGTH and (a.startswith(b) or b.startswith(a))
            for a in words
            for b in theirs
        ):
            return True
    return False


def in_doubt(name: str, kind: str, known: Sequence[Known], since: datetime) -> list[Known]:
    """The entities of `known` that `name` (of `kind`) may be, when the rules cannot
    be sure of it; [] when one entity has it as a sure alias, or none is near. The
    most recently seen first, at most `MOST_PER_NAME`."""
    key = normalise(name)
    if not key:
        return []
    before = [e for e in known if e.first_seen is None or e.first_seen < since]
    fitting = [e for e in before if kinds_agree(e.kind, kind)]
    sure = [e for e in fitting if key in e.aliases and key not in e.weak]
    if len(sure) == 1:
        return []
    found = [e for e in fitting if e in sure or near(key, e)]
    found.sort(key=lambda e: (e.last_seen, e.id), reverse=True)
    return found[:MOST_PER_NAME]


def listing(
    said: Iterable[tuple[str, Sequence[Mention]]],
    known: Mapping[str, Sequence[Known]],
    since: datetime,
) -> Listing:
    """The listing of the names `said` (each turn's project and the mentions its
    texts make), against the `known` entities of each partition (project → its
    entities; '' the user's own), as of the window's first turn `since`."""
    entities: dict[str, Listed] = {}
    doubts: dict[str, Doubt] = {}
    for project, mentions in said:
        partitions = [""] + ([project] if project else [])
        for mention in mentions:
            key = normalise(mention.name)
            if key in doubts:
                continue
            found = [
                (partition, e)
                for partition in partitions
                for e in in_doubt(mention.name, mention.kind, known.get(partition, ()), since)
            ]
            fresh = {e.id for _p, e in found if e.id not in entities}
            if not found or len(entities) + len(fresh) > MOST_LISTED:
                continue
            for partition, e in found:
                if e.id not in entities:
                    entities[e.id] = Listed(f"e{len(entities) + 1}", e, partition)
            labels = tuple(dict.fromkeys(entities[e.id].label for _p, e in found))
            doubts[key] = Doubt(mention.name, labels)
    return Listing(tuple(entities.values()), tuple(doubts.values()))


def resolve_judged(
    name: str, kind: str, known: Sequence[Known], judgement: Judgement | None
) -> Resolved:
    """`resolve`, with the model's judgement first: the entity it named when it is
    one of `known` (how: `model`), else the rules among the entities it did not
    say the name is none of."""
    if judgement is not None and judgement.same_as is not None:
        chosen = next((e for e in known if e.id == judgement.same_as), None)
        if chosen is not None:
            return Resolved(chosen, "model")
    if judgement is not None and judgement.distinct_from:
        known = [e for e in known if e.id not in judgement.distinct_from]
    return resolve(name, kind, known)
