"""First person to third person, for the memories the `offline` provider writes:
"I prefer my editor dark" → "User prefers their editor dark".

Plain rules, enough for the statements it extracts: the verb after "I"/"we" gets
the third-person -s (-es, -ies; "am" → "is", "have" → "has"; modals unchanged),
and inside the rest "I"/"my"/"me"/"mine"/"myself"/"our" become "they"/"their"/
"them"/"theirs"/"themselves"/"their". "we" and "us" are left alone ("us-east1").
"""

from __future__ import annotations

import re


def word_set(words: str) -> frozenset[str]:
    """The space-separated words of `words`, as a set (word lists read better so)."""
    return frozenset(words.split())


_IRREGULAR = {"be": "is", "am": "is", "are": "is", "have": "has", "do": "does", "go": "goes"}
_MODALS = word_set("can could will would shall should may might must")

_PRONOUNS = [
    (re.compile(r"(?<![\w/-])I'm\b"), "they're"),
    (re.compile(r"(?<![\w/-])I've\b"), "they've"),
    (re.compile(r"(?<![\w/-])I'd\b"), "they'd"),
    (re.compile(r"(?<![\w/-])I'll\b"), "they'll"),
    (re.compile(r"(?<![\w/-])I(?![\w/'-])"), "they"),
    (re.compile(r"(?<![\w-])(?:my|our)(?![\w-])", re.I), "their"),
    (re.compile(r"(?<![\w-])mine(?![\w-])", re.I), "theirs"),
    (re.compile(r"(?<![\w-])myself(?![\w-])", re.I), "themselves"),
    (re.compile(r"(?<![\w-])me(?![\w-])", re.I), "them"),
]

_FIRST_PERSON = re.compile(
    r"^(?:i|we)(?P<aux>'m|'re|'ve|'d|'ll|\s+(?P<verb>[a-z]+))\s+(?P<rest>.*)$", re.I
)
_AUX = {"'m": "is", "'re": "is", "'ve": "has", "'d": "would", "'ll": "will"}


def verb3(verb: str) -> str:
    """The third-person singular of `verb` (its first word, if it has several)."""
    first, _, more = verb.partition(" ")
    low = first.lower()
    if low in _IRREGULAR:
        form = _IRREGULAR[low]
    elif low in _MODALS:
        form = low
    elif low.endswith(("s", "sh", "ch", "x", "z", "o")):
        form = low + "es"
    elif len(low) > 1 and low.endswith("y") and low[-2] not in "aeiou":
        form = low[:-1] + "ies"
    else:
        form = low + "s"
    return f"{form} {more}" if more else form


def third(text: str) -> str:
    """`text` with its first-person pronouns in the third person."""
    for pattern, replacement in _PRONOUNS:
        text = pattern.sub(replacement, text)
    return text


def first_person(text: str) -> str:
    """A clause in the first person ("I have two monitors") about the user
    ("User has two monitors"); other clauses with their pronouns changed."""
    match = _FIRST_PERSON.match(text)
    if match is None:
        return third(text)
    aux = match["aux"].lower()
    verb = verb3(match["verb"]) if match["verb"] else _AUX[aux]
    return f"User {verb} {third(match['rest'])}"


def subject_text(subject: str) -> str:
    """A clause's subject, about the user: "I"/"we" → "User", "you" → "The
    assistant", "my editor" → "User's editor"."""
    low = subject.lower()
    if low in ("i", "we"):
        return "User"
    if low == "you":
        return "The assistant"
    match = re.match(r"(?:my|our)\s+(.+)$", subject, re.I)
    if match:
        return f"User's {third(match[1])}"
    return third(subject)


def negate(text: str) -> str:
    """A memory's statement revoked: "User prefers X" → "User no longer prefers X",
    "User's editor is vim" → "User's editor is no longer vim"."""
    match = re.match(r"^User\s+((?:always|never|usually)\s+)?(\w+)\b(.*)$", text)
    if match and (match[2].endswith("s") or match[2] in _MODALS):
        return f"User no longer {match[1] or ''}{match[2]}{match[3]}"
    match = re.match(r"^(.*?\b(?:is|are|must|should|will|can))\s+(.*)$", text)
    if match:
        return f"{match[1]} no longer {match[2]}"
    return f"User no longer holds that {lower_first(text)}"


_LOWERED_FIRST = word_set("The User User's All A An Every Each This Our Their")


def lower_first(text: str) -> str:
    """`text` to go after a comma: a leading "The"/"User"/... lowercased, a name kept."""
    first, sep, rest = text.partition(" ")
    if first in _LOWERED_FIRST:
        first = (
            "the user" if first == "User" else "the user's" if first == "User's" else first.lower()
        )
    return first + sep + rest


def capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]
