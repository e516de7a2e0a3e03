"""What the model providers ask to fill a user's profile from a window of turns,
and how they read the answer: the app's fields (name, type, description; an
enum's values), the turns by label, and a response schema whose `field` and
`turn` are enums of those. A value is answered as text; the writer reads it as
its field's type (`shared.profiles.schema`). An answer naming another field or
turn raises `MalformedReply` and is asked again."""

from __future__ import annotations

from typing import Any

from shared.llm import replies
from shared.llm.base import ExtractionInput, Fault, ProfileFound
from shared.llm.extraction_prompts import turn_labels, turn_lines

PROFILE_INSTRUCTION = "\n".join(
    [
        "You keep a user's profile: a few named fields. From turns of their conversation "
        "with an AI assistant, give the value of each field the user states about "
        "themselves (their own words; never guessed, never the assistant's suggestion).",
        "Each value: the field's name, the label of the turn that states it (the latest "
        "when several do), and the value as short text: an enum's value as listed, a "
        'number as digits, a boolean as "true" or "false". A field nothing states: '
        "leave it out. Turns that state none give an empty list.",
    ]
)


def field_lines(inp: ExtractionInput) -> list[str]:
    lines = ["Fields:"]
    for field in inp.profile:
        kind = f"enum: {', '.join(field.values)}" if field.type == "enum" else field.type
        about = f": {field.description}" if field.description else ""
        lines.append(f"- {field.name} ({kind}){about}")
    return lines


def profile_prompt(inp: ExtractionInput) -> str:
    return "\n".join(
        [
            *field_lines(inp),
            "",
            *turn_lines(inp),
            'Answer with JSON: {"profile": [{"turn": ..., "field": ..., "value": ...}, ...]}.',
        ]
    )


def profile_schema(inp: ExtractionInput) -> dict[str, Any]:
    """Each value: a turn's label, a field's name (both enums) and the value's text."""
    enums = {"turn": turn_labels(inp), "field": [f.name for f in inp.profile], "value": []}
    item = {name: {"type": "string", **({"enum": e} if e else {})} for name, e in enums.items()}
    value = {"type": "object", "properties": item, "required": list(item)}
    answer = {"profile": {"type": "array", "items": value}}
    return {"type": "object", "properties": answer, "required": list(answer)}


def parse_profile(value: Any, inp: ExtractionInput) -> list[ProfileFound]:
    turns = dict(zip(turn_labels(inp), inp.turns, strict=True))
    fields = tuple(f.name for f in inp.profile)
    return [
        ProfileFound(
            turns[replies.choice(item, "turn", tuple(turns), where, Fault.UNKNOWN_ID)].turn_id,
            replies.choice(item, "field", fields, where),
            replies.text(item, "value", where),
        )
        for where, item in replies.objects(value, "profile")
    ]
