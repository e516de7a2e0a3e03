"""What the model providers ask to fill a user's profile from a window of turns,
and how they read the answer: the app's fields (name, type, description; an
enum's values), the turns by label, and a response schema whose `field` and
`turn` are enums of those. A value is answered as text; the writer reads it as
its field's type (`shared.profiles.schema`). An answer naming another field or
turn raises `MalformedReply` and is asked again."""

from __future__ import annotations

from typing import Any

from shared.llm import replies
from shared.llm.base import ExtractionInput, Fault, MalformedReply, ProfileFound
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
    return {
        "type": "object",
        "properties": {
            "profile": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "turn": {"type": "string", "enum": turn_labels(inp)},
                        "field": {"type": "string", "enum": [f.name for f in inp.profile]},
                        "value": {"type": "string"},
                    },
                    "required": ["turn", "field", "value"],
                },
            }
        },
        "required": ["profile"],
    }


def parse_profile(value: Any, inp: ExtractionInput) -> list[ProfileFound]:
    items = replies.field(value, "profile", list, "the reply")
    turns = dict(zip(turn_labels(inp), inp.turns, strict=True))
    fields = tuple(f.name for f in inp.profile)
    found = []
    for index, item in enumerate(items):
        where = f"profile[{index}]"
        if not isinstance(item, dict):
            raise MalformedReply(f"{where} is not an object")
        turn = turns[replies.choice(item, "turn", tuple(turns), where, Fault.UNKNOWN_ID)]
        field = replies.choice(item, "field", fields, where)
        found.append(ProfileFound(turn.turn_id, field, replies.text(item, "value", where)))
    return found
