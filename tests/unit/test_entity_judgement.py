"""The model's judgement in resolution, as tables of exact cases: which known
entities a name is in doubt between (`shared.entities.judging`), how a mention
resolves with a judgement and without, and how the extraction prompt asks for
one and reads it (`shared.llm.entity_prompts`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from shared.entities.judging import (
    MOST_LISTED,
    Doubt,
    Judgement,
    Listed,
    Listing,
    in_doubt,
    listing,
    resolve_judged,
)
from shared.entities.names import Mention, normalise
from shared.entities.resolution import Known
from shared.llm import ExtractionInput, MalformedReply
from shared.llm.entity_prompts import parse_entities
from shared.llm.extraction_prompts import (
    extraction_instruction,
    extraction_prompt,
    extraction_schema,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SINCE = T0 + timedelta(days=10)  # the window's first turn


def day(n: int) -> datetime:
    return T0 + timedelta(days=n)


def entity(i: str, name: str, kind: str, n: int, *also: str, weak: tuple[str, ...] = ()) -> Known:
    """An entity first and last seen on day `n`, with its name and `also` as aliases."""
    aliases = tuple(normalise(a) for a in (name, *also))
    return Known(i, name, kind, aliases, day(n), day(n), weak)


KNOWN = [
    entity("dana-lee", "Dana Lee", "person", 0),
    entity("dana-smith", "Dana Smith", "person", 1, "Dana", weak=("dana",)),
    entity("liz", "Liz Taylor", "person", 2),
    entity("acme", "Acme Corp", "organisation", 3),
    entity("robert", "Robert Smith", "person", 4),
    # Made by a turn of the window itself (archived before the model is asked).
    entity("beth", "Beth Taylor", "person", 10),
]


@pytest.mark.parametrize(
    ("name", "kind", "expected"),
    [
        # One entity has it as its own name: sure.
        ("Dana Lee", "person", []),
        ("Acme Corp", "organisation", []),
        # A first name taken by a rule that may be wrong: both Danas, the latest first.
        ("Dana", "person", ["dana-smith", "dana-lee"]),
        # The window's own "Beth Taylor" is no certainty; Liz shares the surname.
        ("Beth Taylor", "person", ["liz"]),
        # A word shared, a nickname's form, a word that starts another.
        ("Acme", "organisation", ["acme"]),
        ("Bob", "person", ["robert"]),
        ("Rob Smith", "person", ["robert", "dana-smith"]),
        ("Lizzie", "person", ["liz"]),
        # Near nothing of its kind: a new name, nothing to ask.
        ("Berlin", "place", []),
        ("Acme Corp", "place", []),
        ("Priya Patel", "person", []),
    ],
)
def test_in_doubt(name: str, kind: str, expected: list[str]) -> None:
    assert [e.id for e in in_doubt(name, kind, KNOWN, SINCE)] == expected


def test_a_first_name_taken_surely_is_no_doubt() -> None:
    sure = [replace(e, weak=()) for e in KNOWN]
    assert in_doubt("Dana", "person", sure, SINCE) == []


def test_the_listing_labels_each_entity_once_within_its_bounds() -> None:
    heron = [entity("priya", "Priya Patel", "person", 5)]
    said = [
        ("", [Mention("Dana", "person"), Mention("Berlin", "place")]),
        ("heron", [Mention("Priya", "person"), Mention("Dana Smith", "person")]),
        ("", [Mention("DANA", "person")]),  # the same name again: listed once
    ]
    found = listing(said, {"": KNOWN, "heron": heron}, SINCE)
    assert found == Listing(
        (
            Listed("e1", KNOWN[1], ""),
            Listed("e2", KNOWN[0], ""),
            Listed("e3", heron[0], "heron"),
        ),
        (Doubt("Dana", ("e1", "e2")), Doubt("Priya", ("e3",))),
    )
    # "Quill" is near all ten: the three seen last. Each first name is near its own;
    # past MOST_LISTED entities a name that needs another is left out.
    firsts = ["Arlo", "Bryn", "Cato", "Dov", "Ezra", "Finn", "Gus", "Hal", "Ivo", "Jem"]
    many = [entity(f"p{n}", f"{w} Quill", "person", 1) for n, w in enumerate(firsts)]
    said = [("", [Mention(w, "person") for w in ["Quill", *firsts]])]
    bounded = listing(said, {"": many}, SINCE)
    assert len(bounded.entities) == MOST_LISTED == 8
    assert [(d.name, d.labels) for d in bounded.doubts] == [
        ("Quill", ("e1", "e2", "e3")),
        *((w, (f"e{n}",)) for n, w in enumerate(firsts[:5], start=4)),
        ("Hal", ("e3",)),
        ("Ivo", ("e2",)),
        ("Jem", ("e1",)),
    ]


@pytest.mark.parametrize(
    ("name", "judgement", "entity", "how"),
    [
        ("Dana", None, "dana-smith", "name"),
        ("Dana", Judgement("Dana", same_as="dana-lee"), "dana-lee", "model"),
        # An entity not among the known ones (another partition's, merged): the rules.
        ("Dana", Judgement("Dana", same_as="elsewhere"), "dana-smith", "name"),
        ("Dana", Judgement("Dana", distinct_from=("dana-smith",)), "dana-lee", "first name"),
        ("Dana", Judgement("Dana", distinct_from=("dana-smith", "dana-lee")), None, "new"),
        ("Beth Taylor", Judgement("Beth Taylor", same_as="liz"), "liz", "model"),
    ],
)
def test_resolution_with_the_models_judgement(
    name: str, judgement: Judgement | None, entity: str | None, how: str
) -> None:
    resolved = resolve_judged(name, "person", KNOWN, judgement)
    assert (resolved.entity.id if resolved.entity else None, resolved.how) == (entity, how)


LISTING = Listing(
    (Listed("e1", KNOWN[1], ""), Listed("e2", KNOWN[0], "heron")),
    (Doubt("Dana", ("e1", "e2")),),
)
INP = replace(
    ExtractionInput.single("s1", "heron", "", T0, "Dana called.", "Okay."), entities=LISTING
)


def test_the_prompt_asks_for_a_judgement_only_when_a_name_is_in_doubt() -> None:
    prompt = extraction_prompt(INP)
    assert (
        'Known entities a name in the turns may be:\n- "Dana": e1 Dana Smith (person), '
        "e2 Dana Lee (person, project heron)\n\nTurns, oldest first:"
    ) in prompt
    assert '"same_as": the label of the entity it is' in extraction_instruction(INP)
    item = extraction_schema(INP)["properties"]["memories"]["items"]["properties"]["entities"]
    assert sorted(item["items"]["properties"]) == ["distinct", "kind", "name", "same_as"]
    plain = replace(INP, entities=Listing())
    assert "Known entities" not in extraction_prompt(plain)
    assert "same_as" not in extraction_instruction(plain)
    item = extraction_schema(plain)["properties"]["memories"]["items"]["properties"]["entities"]
    assert sorted(item["items"]["properties"]) == ["kind", "name"]


@pytest.mark.parametrize(
    ("item", "judgement", "ignored"),
    [
        ({}, None, []),
        ({"same_as": "e2"}, Judgement("Dana", same_as="dana-lee"), []),
        ({"same_as": "dana-smith"}, Judgement("Dana", same_as="dana-smith"), []),
        ({"same_as": " dana lee "}, Judgement("Dana", same_as="dana-lee"), []),
        ({"same_as": None, "distinct": False}, None, []),
        ({"distinct": True}, Judgement("Dana", distinct_from=("dana-smith", "dana-lee")), []),
        # An invented label, or an id the request never listed: ignored, described.
        ({"same_as": "e9"}, None, ["m.entities[0].same_as 'e9': no entity the request listed"]),
        (
            {"same_as": "liz"},
            None,
            ["m.entities[0].same_as 'liz': no entity the request listed"],
        ),
    ],
)
def test_a_judgement_is_read_with_its_entity(
    item: dict, judgement: Judgement | None, ignored: list[str]
) -> None:
    found: list[str] = []
    named, judged = parse_entities(
        [{"name": "Dana", "kind": "person", **item}], "m", LISTING, found
    )
    assert named == (Mention("Dana", "person"),)
    assert judged == (() if judgement is None else (judgement,))
    assert found == ignored


def test_a_distinct_name_nothing_was_listed_for_says_nothing() -> None:
    found: list[str] = []
    _named, judged = parse_entities(
        [{"name": "Berlin", "kind": "place", "distinct": True}], "m", LISTING, found
    )
    assert (judged, found) == ((), [])


@pytest.mark.parametrize(
    "item",
    [{"same_as": 3}, {"distinct": "yes"}, {"same_as": "e1", "distinct": True}],
    ids=["same-as-not-a-string", "distinct-not-a-boolean", "both"],
)
def test_a_judgement_of_the_wrong_shape_is_malformed(item: dict) -> None:
    with pytest.raises(MalformedReply):
        parse_entities([{"name": "Dana", "kind": "person", **item}], "m", LISTING, [])
