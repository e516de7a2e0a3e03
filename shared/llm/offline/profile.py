"""The `offline` provider's profile: what the user's own text states about them,
for the fields of the app's schema it recognises by their names.

A field is read by what its name says it is: a name ("name", "first_name",
"nickname": "my name is Ada", "call me Ada"), a time zone ("timezone": "I'm
based in the Europe/Berlin timezone", "my time zone is CET"), a language
("preferred_language": "I prefer to speak French", "please answer in
German") or a role ("role", "job_title": "I work as a data engineer at ...",
"I'm a backend engineer"). Any field is also read from "my <its name, with
spaces> is <value>". The value is the words up to the end of the clause; the
writer checks it against the field's type, so "my age is none of your business"
is refused there, not here. The last statement of a field in a turn wins.
"""

from __future__ import annotations

import re

from shared.llm.base import ExtractionInput, ProfileFound
from shared.profiles.schema import ProfileField

# The end of a value: the clause's end, or a conjunction that starts another.
_CLAUSE_END = r"\s*(?:[.;!?,]|\band\b|\bbut\b|\bso\b|$)"
_END = f"(?={_CLAUSE_END})"
_NAME = r"([A-Z][\w'-]*(?: [A-Z][\w'-]*){0,2})"
_WORD = r"([A-Z][a-z]+)"

_PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    "name": (
        re.compile(r"(?i:\bmy (?:first |full )?name is )" + _NAME),
        re.compile(r"(?i:\bcall me )" + _NAME),
        re.compile(r"(?i:\bI(?:'m| am) called )" + _NAME),
    ),
    "timezone": (
        re.compile(r"(?i:\bin (?:the )?)([A-Za-z][\w/+:-]*(?: [A-Z][a-z]+)?) (?i:time ?zone)\b"),
        re.compile(r"(?i:\bmy time ?zone is )([\w/+:-]+(?: [A-Z][a-z]+)?)"),
    ),
    "language": (
        re.compile(
            r"(?i:\bI(?: would|'d)? (?:prefer|like|want) to (?:speak|talk|chat|write|communicate)"
            r"(?: in)? )" + _WORD
        ),
        re.compile(
            r"(?i:\b(?:answer|reply|respond|talk to me|speak to me|write to me) in )" + _WORD
        ),
        re.compile(r"(?i:\bmy (?:preferred |native )?language is )" + _WORD),
    ),
    "role": (
        re.compile(r"(?i:\bI work as (?:an? |the )?)([^.,;!?]+?)(?= at | for |" + _END[3:]),
        re.compile(
            r"(?i:\bmy (?:role|job|job title|position) is (?:an? |the )?)([^.,;!?]+?)" + _END
        ),
        re.compile(
            r"(?i:\bI(?:'m| am) (?:an? ))([a-z][a-z -]*?(?:engineer|developer|manager|designer|"
            r"scientist|analyst|architect|lead|consultant|teacher|researcher|writer|student|"
            r"administrator|director|founder|nurse|doctor|lawyer))\b"
        ),
    ),
}
# What a field's name says it is.
_KINDS = (
    ("timezone", ("timezone", "time_zone", "tz")),
    ("language", ("language",)),
    ("role", ("role", "job", "occupation", "position", "title")),
    ("name", ("name", "nickname")),
)


def kind_of(field: ProfileField) -> str:
    """What the field is by its name ("" none of the known): a string or an enum."""
    if field.type not in ("string", "enum"):
        return ""
    parts = field.name.split("_")
    for kind, words in _KINDS:
        if field.name in words or any(word in parts for word in words):
            return kind
    return ""


def _generic(field: ProfileField) -> re.Pattern[str]:
    words = r"\s+".join(re.escape(w) for w in field.name.split("_"))
    return re.compile(r"(?i:\bmy " + words + r"\s+(?:is|are|:)\s+)([^.;!?,]+?)" + _END)


def _last(patterns: tuple[re.Pattern[str], ...], text: str) -> str:
    """The value the last statement in `text` gives ("" none)."""
    best, at = "", -1
    for pattern in patterns:
        for match in pattern.finditer(text):
            if match.start() > at:
                best, at = match.group(1).strip(), match.start()
    return best


def fill_profile(inp: ExtractionInput) -> list[ProfileFound]:
    """Each field's value each turn states, in the turns' order, then the fields'."""
    found = []
    for turn in inp.turns:
        for field in inp.profile:
            patterns = (*_PATTERNS.get(kind_of(field), ()), _generic(field))
            value = _last(patterns, turn.user)
            if value:
                found.append(ProfileFound(turn.turn_id, field.name, value))
    return found
