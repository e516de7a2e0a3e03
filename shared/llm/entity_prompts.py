"""The entities part of the extraction task of a model provider: the entities each
memory names, and the model's judgement of which known entity a name is.

The prompt lists the known entities the turns' names may be, by label (`e1`),
under each name in doubt (`shared.entities.judging.listing`); only then does the
instruction ask for a judgement and the schema hold its two fields. An entity's
`same_as` names the listed entity it is (its label; its id or its name are taken
too), `distinct: true` says it is none of those listed for its name. A
`same_as` that names no listed entity (an invented id, another user's) is
ignored: the rest of the answer stands, and the caller counts it as an invalid
answer of fault `unknown_id`. A field of the wrong type is a malformed answer,
asked again like any other (`shared.llm.asking`).
"""

from __future__ import annotations

from typing import Any

from shared.entities.judging import Judgement, Listing
from shared.entities.names import KINDS as ENTITY_KINDS
from shared.entities.names import Mention, normalise
from shared.llm import replies
from shared.llm.base import MalformedReply

LISTING_HEADING = "Known entities a name in the turns may be:"


def item_schema(listing: Listing) -> dict[str, Any]:
    """The schema of one entity a memory names."""
    properties: dict[str, Any] = {
        "name": {"type": "string"},
        "kind": {"type": "string", "enum": list(ENTITY_KINDS)},
    }
    if listing.doubts:
        properties |= {"same_as": {"type": "string"}, "distinct": {"type": "boolean"}}
    return {"type": "object", "properties": properties, "required": ["name", "kind"]}


def instruction(listing: Listing) -> str:
    """The instruction's line about a memory's entities."""
    line = (
        "- entities: the people, organisations, projects, places, tools, pets and events it "
        'names, each {"name": as said, "kind": one of ' + ", ".join(ENTITY_KINDS) + "}"
    )
    if not listing.doubts:
        return line + ";"
    return line + (
        f'; for a name listed under "{LISTING_HEADING}", add "same_as": the label of the '
        'entity it is, or "distinct": true when it is none of those (neither when unsure);'
    )


def listing_lines(listing: Listing) -> list[str]:
    """The prompt's lines of the listed entities, under each name in doubt (none
    when no name is)."""
    if not listing.doubts:
        return []
    by_label = listing.by_label()
    lines = [LISTING_HEADING]
    for doubt in listing.doubts:
        shown = []
        for label in doubt.labels:
            listed = by_label[label]
            project = f", project {listed.project_id}" if listed.project_id else ""
            shown.append(f"{label} {listed.entity.name} ({listed.entity.kind}{project})")
        lines.append(f'- "{doubt.name}": ' + ", ".join(shown))
    return [*lines, ""]


def parse_entities(
    value: Any, where: str, listing: Listing, ignored: list[str]
) -> tuple[tuple[Mention, ...], tuple[Judgement, ...]]:
    """The entities a reply's memory names (none when it names none) and the
    judgements it gives of them; each `same_as` that names no listed entity is
    left out and described in `ignored`."""
    if not isinstance(value, list):
        raise MalformedReply(f"{where}.entities is not a list")
    named, judged = [], []
    for index, item in enumerate(value):
        at = f"{where}.entities[{index}]"
        if not isinstance(item, dict):
            raise MalformedReply(f"{at} is not an object")
        name = replies.text(item, "name", at)
        named.append(Mention(name, replies.choice(item, "kind", ENTITY_KINDS, at)))
        judgement = _judgement(item, at, name, listing, ignored)
        if judgement is not None:
            judged.append(judgement)
    return tuple(named), tuple(judged)


def _judgement(
    item: dict[str, Any], at: str, name: str, listing: Listing, ignored: list[str]
) -> Judgement | None:
    same_as, distinct = item.get("same_as"), item.get("distinct", False)
    if same_as is not None and not isinstance(same_as, str):
        raise MalformedReply(f"{at}: 'same_as' is not a string")
    if not isinstance(distinct, bool):
        raise MalformedReply(f"{at}: 'distinct' is not a boolean")
    if same_as and distinct:
        raise MalformedReply(f"{at}: 'same_as' and 'distinct' together")
    if same_as:
        entity_id = listed_entity(same_as, listing)
        if entity_id is None:
            ignored.append(f"{at}.same_as {same_as!r}: no entity the request listed")
            return None
        return Judgement(name, same_as=entity_id)
    labels = listing.labels_of(name)
    if not distinct or not labels:
        return None  # no judgement, or one of a name nothing was listed for
    by_label = listing.by_label()
    return Judgement(name, distinct_from=tuple(by_label[label].entity.id for label in labels))


def listed_entity(answer: str, listing: Listing) -> str | None:
    """The id of the listed entity `answer` names: by its label, its id, or a name
    one listed entity alone has; None if it names none."""
    text = answer.strip()
    for listed in listing.entities:
        if text in (listed.label, listed.entity.id):
            return listed.entity.id
    key = normalise(text)
    by_name = [listed for listed in listing.entities if normalise(listed.entity.name) == key]
    return by_name[0].entity.id if len(by_name) == 1 else None
