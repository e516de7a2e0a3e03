"""Entity names, resolution and the valid-time rule of facts, as tables of exact
cases (`shared.entities`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.entities.facts import Held, stated, timed
from shared.entities.names import Mention, mentions, normalise
from shared.entities.resolution import Known, resolve

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def known(*entities: tuple[str, str, str]) -> list[Known]:
    """(id, name, kind) each, seen one day apart in order."""
    return [
        Known(i, name, kind, (normalise(name),), T0 + timedelta(days=n))
        for n, (i, name, kind) in enumerate(entities)
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Dana moved to Berlin.", [("Dana", "person"), ("Berlin", "place")]),
        (
            "My sister Dana Lee works at Acme Corp in New York.",
            [("Dana Lee", "person"), ("Acme Corp", "organisation"), ("New York", "place")],
        ),
        ("The Heron project uses Postgres.", [("Heron", "project"), ("Postgres", "tool")]),
        ("Our dog Biscuit is 3.", [("Biscuit", "pet")]),
        ("I met Bob at the PyCon conference on Monday.", [("Bob", "person"), ("PyCon", "event")]),
        ("Dana's manager is Priya.", [("Dana", "person"), ("Priya", "other")]),
        ("I prefer tabs. Thanks!", []),
    ],
)
def test_mentions(text: str, expected: list[tuple[str, str]]) -> None:
    assert mentions(text) == [Mention(name, kind) for name, kind in expected]


def test_a_sentence_lends_no_lead_word_to_the_next() -> None:
    # "in" belongs to "lives in Paris.": "Noted" opens a sentence of its own, one
    # word of no known kind, which names an entity only if one is known already.
    assert mentions("Dana lives in Paris. Noted.") == [
        Mention("Dana", "person"),
        Mention("Paris", "place"),
        Mention("Noted", "other", sure=False),
    ]


PEOPLE = known(
    ("robert", "Robert Smith", "person"),
    ("dana-lee", "Dana Lee", "person"),
    ("dana-smith", "Dana Smith", "person"),
    ("jonathan", "Jonathan Price", "person"),
    ("acme", "Acme Corp", "organisation"),
    ("priya", "Priya", "person"),
)


@pytest.mark.parametrize(
    ("name", "kind", "entity", "how"),
    [
        ("Robert Smith", "person", "robert", "name"),
        ("ROBERT SMITH", "person", "robert", "name"),
        ("Róbert Smith", "person", "robert", "name"),
        ("Bob Smith", "person", "robert", "nickname"),
        ("Bob", "person", "robert", "first name"),
        # Two people with one first name: the one seen last.
        ("Dana", "person", "dana-smith", "first name"),
        ("Dana Lee", "person", "dana-lee", "name"),
        ("Dana Li", "person", None, "new"),
        ("Dana Brown", "person", None, "new"),
        ("Jonathon Price", "person", "jonathan", "nickname"),
        ("Jonahtan Price", "person", "jonathan", "similar"),
        ("Jonathan Pryce", "person", "jonathan", "similar"),
        ("Priya Patel", "person", "priya", "full name"),
        ("Acme Corp", "organisation", "acme", "name"),
        ("Acme Corp", "other", "acme", "name"),
        # Another kind is another thing of the same name.
        ("Acme Corp", "place", None, "new"),
        ("Berlin", "place", None, "new"),
    ],
)
def test_resolution(name: str, kind: str, entity: str | None, how: str) -> None:
    resolved = resolve(name, kind, PEOPLE)
    assert (resolved.entity.id if resolved.entity else None, resolved.how) == (entity, how)


def test_a_full_name_is_not_taken_for_a_first_name_two_people_share() -> None:
    both = known(("dana", "Dana", "person"), ("dana-smith", "Dana Smith", "person"))
    assert resolve("Dana Lee", "person", both).entity is None


def test_facts_read_from_a_memory() -> None:
    named = {"dana": "d", "priya": "p", "berlin": "b"}
    fact = stated("Dana's manager is Priya.", named)
    assert fact is not None
    assert (fact.subject_id, fact.predicate, fact.object_id, fact.value) == (
        "d",
        "manager",
        "p",
        "priya",
    )
    moved = stated("Dana moved to Berlin.", named)
    assert moved is not None
    assert (moved.predicate, moved.object_id, moved.single) == ("location", "b", True)
    assert stated("User lives in Berlin.", named) is None


def day(n: int) -> datetime:
    return T0 + timedelta(days=n)


@pytest.mark.parametrize(
    ("held", "at", "value", "ends", "closes", "same"),
    [
        # A change closes the open older value at its own start.
        ([Held("paris", "paris", day(1), None)], day(5), "berlin", None, ("paris",), None),
        # The same value again: nothing new.
        ([Held("paris", "paris", day(1), None)], day(5), "paris", None, (), "paris"),
        # A late event never closes the newer fact: it ends where that one begins.
        ([Held("berlin", "berlin", day(5), None)], day(2), "paris", day(5), (), None),
        # ... and cuts short the older one the newer had closed.
        (
            [Held("paris", "paris", day(1), day(5)), Held("berlin", "berlin", day(5), None)],
            day(3),
            "lisbon",
            day(5),
            ("paris",),
            None,
        ),
    ],
)
def test_valid_time_rule(
    held: list[Held],
    at: datetime,
    value: str,
    ends: datetime | None,
    closes: tuple[str, ...],
    same: str | None,
) -> None:
    rule = timed(at, True, held, value)
    assert (rule.valid_to, rule.closes, rule.same) == (ends, closes, same)


def test_a_fact_of_many_values_closes_none() -> None:
    rule = timed(day(5), False, [Held("py", "python", day(1), None)], "go")
    assert (rule.valid_to, rule.closes) == (None, ())
