"""A memory's statement read as one clause (subject, predicate, value), for the
`offline` consolidator: "The Heron build now uses gcc 14." → subject "heron build",
predicate "use", value "gcc 14". Plain rules over a small lexicon
(`shared.llm.offline.clause_lexicon`), no model.

- Markers come out first. "now", "from now on" and "nowadays" say the value
  holds now (which older value it replaces, if any, the values tell:
  `same_thing`); "instead" says it replaces one; "no longer" is a negation,
  unless a new value follows ("no longer uses gcc 12 but gcc 14": gcc 14
  replaces gcc 12); "instead of W" and "from W to" name the value replaced.
  Filler adverbs ("currently", "still") go.
- The verb is the first one of the lexicon after the subject: a change verb
  ("moved to", "has switched to", "was postponed to", ...) replaces the value of
  the predicate it stands for ("moved to" a time → when, else location); a verb
  phrase states its predicate, synonyms alike ("lives in", "resides in", "is
  based in" → location). A copula reads its value: "is a/an X" → is a, a time →
  when, "in/at X" → location, else be.
- After "now" or "no longer" an unknown verb is a predicate of its own ("now
  targets ARM64" → target); `parse(older, verb="target")` finds it in an older
  statement.

Normalised: lowercase, without leading determiners; "I", "we", "the user",
"User's" name the user; a value without its leading prepositions and articles
and without a trailing "in session X" (where extraction notes "now").

No clause (None) for a question, several sentences or clauses, a pronoun for
subject ("it", "she"), or a modal, a negation or a frequency before the verb
("User does not like X", "User never uses tabs": a rule): consolidation then
compares words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shared.llm.offline import clause_lexicon as lexicon
from shared.llm.offline.facets import value_facet

MAX_SUBJECT_WORDS = 6

_SEVERAL = re.compile(r"[;?]|[.!]\s+\S")
_SCOPE_LEAD = re.compile(r"^(?:for|in)\s+(?:project|session)\s+\S+?\s*,\s*", re.I)
_SESSION_TAIL = re.compile(r"\s+in\s+session\s+\S+$", re.I)
_CHANGE_MARKS = re.compile(r"(?:,\s*)?\b(?:from\s+now\s+on|nowadays|now)\b(?:\s*,)?", re.I)
_NO_LONGER = re.compile(r"\bno\s+longer\b", re.I)
_INSTEAD_OF = re.compile(r"\s+instead\s+of\s+(?P<previous>.+)$", re.I)
_INSTEAD = re.compile(r",?\s+instead$", re.I)
_BUT = re.compile(r",?\s+but\s+(?:rather\s+|instead\s+)?", re.I)
_FROM_TO = re.compile(r"^from\s+(.+?)\s+(?:to|until|till|for)\s+(.+)$", re.I)
_TO = re.compile(r"^(?:to|until|till|for)\s+", re.I)
_TRAILING = re.compile(r"[\s.!,:]+$")
_WORD = re.compile(r"[\w.+#/:'-]+")


@dataclass(frozen=True)
class Clause:
    subject: str
    predicate: str
    value: str
    single: bool  # the subject has one value of this predicate at a time
    replaces: bool = False  # the value replaced another ("switched to", "instead")
    negated: bool = False  # "no longer": the value holds no more
    previous: str = ""  # the value it changed from, when it says


def parse(text: str, verb: str = "") -> Clause | None:
    """`text` as a clause, None when it does not read as one (see the module
    docstring). `verb`: a predicate of its own to find too (an older statement
    of a clause whose predicate was such a verb)."""
    if verb in lexicon.PREDICATE_NAMES:
        verb = ""  # the lexicon's own: its phrases find it ("location" is no verb)
    text = _TRAILING.sub("", _SESSION_TAIL.sub("", _SCOPE_LEAD.sub("", text.strip())))
    if not text or _SEVERAL.search(text):
        return None
    text, instead, previous = _instead(text)
    words, marker, marked = _without_markers(text)
    found = _verb(words, marker, verb)
    if found is None:
        return None
    at, predicate, length, changes = found
    subject = _subject(words[:at])
    raw_value = " ".join(words[at + length :])
    if subject is None or not raw_value:
        return None
    replaces, negated = instead or changes, marked == "negation"
    if changes:
        previous, raw_value = _from_to(raw_value, previous)
    if negated and (parts := _BUT.split(raw_value, maxsplit=1)) and len(parts) == 2:
        # "no longer uses gcc 12 but gcc 14": a change from the one to the other.
        negated, replaces, previous, raw_value = False, True, _value(parts[0]), parts[1]
    value = _value(raw_value)
    if not value:
        return None
    predicate = _predicate(predicate, value, raw_value)
    single = predicate in lexicon.SINGLE_VALUED or (
        predicate == "be" and _one_at_a_time(subject, words[:at], raw_value)
    )
    return Clause(subject, predicate, value, single, replaces, negated, previous)


def _instead(text: str) -> tuple[str, bool, str]:
    """`text` without a trailing "instead (of W)", whether it had one, and W."""
    if match := _INSTEAD_OF.search(text):
        return text[: match.start()], True, _value(match["previous"])
    if match := _INSTEAD.search(text):
        return text[: match.start()], True, ""
    return text, False, ""


def _from_to(raw_value: str, previous: str) -> tuple[str, str]:
    """A change verb's old and new values: "from Friday to Monday", "to Monday"."""
    if match := _FROM_TO.match(raw_value):
        return _value(match[1]), match[2]
    return previous, _TO.sub("", raw_value)


def is_time(value: str) -> bool:
    """Does `value` (normalised) name a time: a day, a date, an hour, "next week"?"""
    words = value.split()
    while words and words[0] in lexicon.TIME_LEADS:
        words = words[1:]
    if not words:
        return False
    first = words[0]
    return first in lexicon.TIME_WORDS or lexicon.TIME_FORM.match(first) is not None


def _without_markers(text: str) -> tuple[list[str], int, str]:
    """The words without the markers, the index of the word after the first one
    (-1 if none), and what it marked ("now", "negation" or "")."""
    marked, marker = "", -1
    negation = _NO_LONGER.search(text)
    match = negation or _CHANGE_MARKS.search(text)
    if match is not None:
        marked = "negation" if negation else "now"
        marker = len(_content_words(text[: match.start()]))
        # Any other change marker goes too ("no longer X but now Y" says no more).
        text = _CHANGE_MARKS.sub(" ", f"{text[: match.start()]} {text[match.end() :]}")
    return _content_words(text), marker, marked


def _content_words(text: str) -> list[str]:
    return [w for w in _words(text) if w.lower() not in lexicon.FILLER]


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


def _verb(words: list[str], marker: int, verb: str) -> tuple[int, str, int, bool] | None:
    """The first verb after a subject: (its index, its predicate, its length in
    words, whether it is a change verb)."""
    lowered = [w.lower() for w in words]
    for at in range(1, min(len(words) - 1, MAX_SUBJECT_WORDS + 1)):
        if lowered[at - 1] in lexicon.NOT_IN_SUBJECT:
            return None  # a modal, a negation, a frequency: no plain statement of a value
        if lowered[at - 1] in lexicon.NOT_SUBJECT_END:
            continue  # "the use of tabs is ...": "use" is no verb after "the"
        for phrase, predicate, changes in lexicon.VERB_PHRASES:
            end = at + len(phrase)
            if tuple(lowered[at:end]) != phrase or end >= len(words):
                continue
            if changes and lowered[end] not in lexicon.CHANGE_PARTICLES:
                continue  # "moved" needs its "to": "moved house" is no change of value
            return at, predicate, len(phrase), changes
        if (verb and _lemma(lowered[at]) == verb) or at == marker:
            return at, _lemma(lowered[at]), 1, False
    return None


def _subject(words: list[str]) -> str | None:
    lowered = [w.lower().removesuffix("'s") for w in words]
    while lowered and lowered[0] in lexicon.DETERMINERS:
        lowered = lowered[1:]
    if not lowered or (len(lowered) == 1 and lowered[0] in lexicon.PRONOUNS):
        return None
    if lowered[0] in lexicon.THE_USER:
        lowered[0] = "user"
    return " ".join(lowered)


def _one_at_a_time(subject: str, words: list[str], raw_value: str) -> bool:
    """Does the subject "be" one thing at a time? Yes for an attribute ("the API
    timeout", "User's editor": two words or more) and for a subject whose value
    names something ("the cache is Redis", "the region is us-east1"); no for
    someone ("Alice is tall", "User is vegetarian") or a plain description ("the
    project is open source" and "the project is fast" may both hold)."""
    if subject == "user" or (len(words) == 1 and words[0][:1].isupper()):
        return False
    names = any(c.isdigit() for c in raw_value) or any(w[:1].isupper() for w in raw_value.split())
    return len(subject.split()) > 1 or names


def _value(text: str) -> str:
    words = [w.lower() for w in _words(text)]
    while words and words[0] in lexicon.VALUE_LEADS:
        words = words[1:]
    return " ".join(words).rstrip(".,:")


def _predicate(predicate: str, value: str, raw_value: str) -> str:
    """A predicate that depends on its value: a copula's ("is a/an X", a time, "in
    X"), and a change verb's ("moved to" a time or a place)."""
    if predicate in lexicon.BY_VALUE:
        timed, otherwise = lexicon.BY_VALUE[predicate]
        if is_time(value):
            return timed
        if predicate == "be":
            first = raw_value.split()[0].lower()
            if first in ("a", "an"):
                return "is a"
            if first in ("in", "at"):
                return "location"
        return otherwise
    return predicate


def _lemma(verb: str) -> str:
    """The verb without its third-person -s ("targets" → "target")."""
    if verb.endswith("ies") and len(verb) > 4:
        return verb[:-3] + "y"
    if verb.endswith(("sses", "shes", "ches", "xes", "zes", "oes")):
        return verb[:-2]
    if verb.endswith("s") and not verb.endswith("ss"):
        return verb[:-1]
    return verb


def same_thing(a: str, b: str) -> bool:
    """Are two values (normalised) the same thing, perhaps in another version or
    number: the same `head`, or the same facet of `shared.llm.offline.facets` ("vim",
    "neovim": editors)?"""
    facet = value_facet(a)
    return head(a) == head(b) or (facet is not None and facet == value_facet(b))


def head(value: str) -> str:
    """What a value is an instance of, compared to tell a new version of it from
    another thing: the last word of its first phrase that is not a number or a
    version ("gcc 14" → "gcc", "python 3.11 with postgresql" → "python", "light
    mode" → "mode")."""
    words: list[str] = []
    for word in value.split():
        if word in lexicon.PHRASE_ENDS:
            break
        words.append(word)
    named = [w for w in words if not lexicon.NUMBER.match(w)]
    return named[-1] if named else ""
