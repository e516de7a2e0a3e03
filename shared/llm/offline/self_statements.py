"""Statements about the user and their work that `shared.llm.offline.statements`'
patterns of preferences and rules do not read, for the `offline` provider's
extraction; tried after those, in this order (case-insensitive):

| pattern | kind | memory |
|---|---|---|
| I'm a/an N, I'm based in/from X, I'm <a lasting trait>, I'm <Name> | fact | User is ... |
| I'm/we're <planning, building, moving...> X | fact | User is planning X |
| I/we <live, work, speak, eat, run...> X (present tense), I/we don't V X | fact | User lives in X |
| I've started/stopped V-ing X | fact | User has started V-ing X |
| I/we'll <stay, visit, move, travel...> X | fact | User will stay in X |
| I/we/let's went/go/picked/chose/settled on X | fact | User chose X |
| S moved/migrated/switched/pushed/upgraded (O) (from A) to B | fact | S moved (O) to B |
| my/our S <verb>s X, my S doesn't V X | fact | User's S Vs X |
| the S runs/is hosted/lives in/on X | fact | The S runs in X |
| don't (ever) <show, suggest...> X | rule | User wants the assistant to never ... |
| please <keep, use, answer...> X | preference | User wants the assistant to ... |

Each is a lasting statement, not a passing state: a trait must be one of a small
lexicon ("I'm vegetarian", not "I'm tired"), a verb one of the lasting activities
("I live in", not "I think"), a progressive one of the plans ("I'm planning",
not "I'm trying"); an object that is only a pronoun ("it", "that") states
nothing the memory could say.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from shared.llm.offline.facets import noun_phrase, subject_entity, value_entity
from shared.llm.offline.phrasing import subject_text, third, verb3, word_set
from shared.llm.offline.stated import Reading, Stated

_PRONOUN_OBJECTS = word_set("it this that them these those one so there here")
_TRAITS = {
    "diet": word_set("vegetarian vegan pescatarian kosher halal"),
    "allergy": word_set("allergic intolerant lactose-intolerant coeliac celiac diabetic"),
    "marital status": word_set("married single divorced widowed engaged"),
    "work": word_set("retired freelance self-employed unemployed remote"),
    "handedness": word_set("left-handed right-handed colourblind colorblind"),
}
_TRAIT_OF = {word: entity for entity, words in _TRAITS.items() for word in words}
_PLANS = word_set(
    "planning building learning moving preparing organising organizing starting joining "
    "leaving studying training writing migrating relocating renovating saving expecting "
    "developing launching hiring teaching using running maintaining"
)
_LASTING = (
    r"live|work|speak|study|teach|manage|lead|maintain|own|run|host|deploy|eat|drink|drive|"
    r"play|commute|predict|build|develop|ship|sell|serve|support|code|train|practi[cs]e|"
    r"report|belong"
)
_PLANNED = r"stay|live|move|travel|fly|visit|spend|work|relocate"
_CHANGES = (
    r"moved|migrated|switched|changed|upgraded|downgraded|pushed|postponed|rescheduled|"
    r"raised|lowered|increased|decreased|bumped|extended|shortened|renamed"
)
_PLEASE = word_set("keep use write answer reply respond format avoid stop call address")
# What ends the part of an object worth keeping: a reason or an afterthought.
_OBJECT_END = re.compile(r",|\s+(?:because|since|mostly\s+because|as\s+it|so\s+that)\b", re.I)
_TRAILING = re.compile(r"\s+(?:in\s+the\s+end|after\s+all|then|for\s+now|eventually)$", re.I)


def _object(text: str) -> str | None:
    """The object worth keeping of a statement, or None when it is only a pronoun."""
    text = _TRAILING.sub("", _OBJECT_END.split(text, maxsplit=1)[0].strip(" ,."))
    words = text.split()
    if not words or (words[0].lower() in _PRONOUN_OBJECTS and len(words) < 3):
        return None
    return text


def _claim(entity: str, kind: str, text: str) -> list[Stated]:

    return [Stated(entity, kind, text)]


def _i_am(match: re.Match[str], context: Reading) -> list[Stated] | None:
    rest = _object(match["rest"])
    if rest is None:
        return None
    first = rest.split()[0].lower().strip(",")
    if first in ("a", "an") and rest.split()[1:2] not in (["bit"], ["little"], ["lot"]):
        return _claim(noun_phrase(rest) or "occupation", "fact", f"User is {third(rest)}")
    if re.match(r"(?:based|located|living)\s+in\s|(?:originally\s+)?from\s", rest, re.I):
        return _claim("location", "fact", f"User is {third(rest)}")
    if first in _TRAIT_OF:
        return _claim(_TRAIT_OF[first], "fact", f"User is {third(rest)}")
    if first in _PLANS:
        return _claim(value_entity(rest.split(" ", 1)[-1]), "fact", f"User is {third(rest)}")
    if re.match(r"on\s+call\b|on\s+the\s+\S+(?:\s+\S+)?\s+team\b|in\s+charge\s+of\s", rest, re.I):
        return _claim(noun_phrase(rest), "fact", f"User is {third(rest)}")
    if re.fullmatch(r"[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?", rest):
        return _claim("name", "fact", f"User's name is {rest}")
    return None


def _we_are(match: re.Match[str], context: Reading) -> list[Stated] | None:
    rest = _object(match["rest"])
    if rest is None or rest.split()[0].lower() not in _PLANS:
        return None
    return _claim(value_entity(rest.split(" ", 1)[-1]), "fact", f"User is {third(rest)}")


def _lasting(match: re.Match[str], context: Reading) -> list[Stated] | None:
    obj = _object(match["obj"])
    if obj is None:
        return None
    verb = match["verb"].lower()
    if match["neg"]:
        return _claim(value_entity(obj), "fact", f"User does not {verb} {third(obj)}")
    return _claim(value_entity(obj), "fact", f"User {verb3(verb)} {third(obj)}")


def _started(match: re.Match[str], context: Reading) -> list[Stated] | None:
    rest = _object(match["rest"])
    if rest is None:
        return None
    text = f"User has {match['verb'].lower()} {third(rest)}"
    return _claim(value_entity(rest.split(" ", 1)[-1]), "fact", text)


def _will(match: re.Match[str], context: Reading) -> list[Stated] | None:
    rest = _object(match["rest"])
    if rest is None:
        return None
    text = f"User will {match['verb'].lower()} {third(rest)}"
    return _claim(value_entity(rest), "fact", text)


def _chose(match: re.Match[str], context: Reading) -> list[Stated] | None:
    verb, prep = match["verb"].lower(), (match["prep"] or "").lower()
    if verb in ("go", "went", "going", "gone") and prep != "with":
        return None  # "we went to the gym" is no choice
    obj = _object(match["obj"])
    if obj is None:
        return None
    if verb == "decided" and not prep:
        if not obj.lower().startswith("to "):
            return None
        return _claim(value_entity(obj[3:]), "fact", f"User decided {third(obj)}")
    return _claim(value_entity(obj), "fact", f"User chose {third(obj)}")


def _changed(match: re.Match[str], context: Reading) -> list[Stated] | None:
    subject, verb = re.sub(r"'ve$", "", match["subj"], flags=re.I), match["verb"].lower()
    if subject.split()[0].lower() in _PRONOUN_OBJECTS | word_set("you he she they"):
        return None
    new = _object(match["new"])
    if new is None:
        return None
    thing = (match["obj"] or "").strip()
    moved = f"{verb} {third(thing)} to" if thing else f"{verb} to"
    entity = subject_entity(thing or subject, new)
    return _claim(entity, "fact", f"{subject_text(subject)} {moved} {third(new)}")


def _my_verb(match: re.Match[str], context: Reading) -> list[Stated] | None:
    subject, verb, rest = match["subj"], match["verb"], match["rest"]
    if verb.lower() in ("is", "was", "has been") or rest.lower().startswith(("to ", "that ")):
        return None
    text = f"User's {third(subject)} {verb.lower()} {third(rest)}"
    return _claim(subject_entity(subject, rest), "fact", text)


def _runs_on(match: re.Match[str], context: Reading) -> list[Stated] | None:
    subject = match["subj"]
    if subject.split()[0].lower() in _PRONOUN_OBJECTS | word_set("i we you he she they"):
        return None
    text = f"{third(subject)} {match['verb'].lower()} {match['prep'].lower()} {third(match['val'])}"
    return _claim(subject_entity(subject, match["val"]), "fact", text[:1].upper() + text[1:])


def _do_not_do(match: re.Match[str], context: Reading) -> list[Stated] | None:
    rest = match["rest"]
    text = f"User wants the assistant to never {third(rest)}"
    return _claim(noun_phrase(rest.split(" ", 1)[-1]), "rule", text)


def _please(match: re.Match[str], context: Reading) -> list[Stated] | None:
    verb, rest = match["verb"].lower(), match["rest"]
    if verb not in _PLEASE:
        return None
    text = f"User wants the assistant to {verb} {third(rest)}"
    return _claim(noun_phrase(rest), "preference", text)


_WE = r"^(?:i|we)"
PATTERNS: list[tuple[re.Pattern[str], Callable[[re.Match[str], Reading], list[Stated] | None]]] = [
    (re.compile(r"^(?:i'm|i\s+am)\s+(?:also\s+|now\s+|still\s+)?(?P<rest>\S.*)$", re.I), _i_am),
    (
        re.compile(r"^(?:we're|we\s+are)\s+(?:also\s+|now\s+|still\s+)?(?P<rest>\S.*)$", re.I),
        _we_are,
    ),
    (
        re.compile(
            rf"{_WE}\s+(?P<neg>don't\s+|do\s+not\s+)?(?:also\s+|still\s+|now\s+|currently\s+|"
            rf"mostly\s+|mainly\s+)?(?P<verb>{_LASTING})\s+(?P<obj>.+)$",
            re.I,
        ),
        _lasting,
    ),
    (
        re.compile(
            rf"{_WE}(?:'ve|\s+have)?\s+(?:just\s+|recently\s+)?(?P<verb>started|stopped|quit)\s+"
            r"(?P<rest>\w+ing\b.*)$",
            re.I,
        ),
        _started,
    ),
    (re.compile(rf"{_WE}(?:'ll|\s+will)\s+(?P<verb>{_PLANNED})\s+(?P<rest>.+)$", re.I), _will),
    (
        re.compile(
            r"^(?:i|we|let's|let\s+us)(?:'ve|'re|'m|'ll|\s+have|\s+are|\s+am|\s+will)?\s+"
            r"(?:finally\s+|just\s+|eventually\s+|also\s+)?"
            r"(?P<verb>went|go|going|gone|chose|chosen|choose|picked|pick|selected|settled|"
            r"decided|opted)\s+(?:(?P<prep>with|on|for)\s+)?(?P<obj>.+)$",
            re.I,
        ),
        _chose,
    ),
    (
        re.compile(
            rf"^(?P<subj>(?:[\w.+#'-]+\s+){{0,3}}?[\w.+#'-]+)\s+(?:has\s+|have\s+|was\s+|"
            rf"were\s+|'ve\s+)?(?:just\s+|finally\s+)?(?P<verb>{_CHANGES})\s+"
            r"(?:(?P<obj>(?:the|our|my|their)\s+[\w .+#'-]+?)\s+)?(?:(?:over\s+)?from\s+.+?\s+)?"
            r"to\s+(?P<new>.+)$",
            re.I,
        ),
        _changed,
    ),
    (
        re.compile(
            r"^(?:my|our)\s+(?P<subj>(?:[\w'-]+\s+){0,2}?[\w'-]+)\s+"
            r"(?P<verb>doesn't|does\s+not|don't|do\s+not|has|have|[a-z]+s)\s+(?P<rest>.+)$",
            re.I,
        ),
        _my_verb,
    ),
    (
        re.compile(
            r"^(?P<subj>(?:the\s+)?(?:[\w.+#'-]+\s+){0,3}?[\w.+#'-]+)\s+"
            r"(?P<verb>runs|is\s+hosted|is\s+deployed|lives|sits)\s+(?P<prep>in|on)\s+"
            r"(?P<val>.+)$",
            re.I,
        ),
        _runs_on,
    ),
    (
        re.compile(
            r"^(?:please\s+)?(?:don't|do\s+not|dont)\s+(?:ever\s+)?(?P<rest>(?:show|suggest|use|"
            r"give|write|add|send|include|mention|recommend|call|format|touch|run|change|book|"
            r"offer|put)\b.+)$",
            re.I,
        ),
        _do_not_do,
    ),
    (re.compile(r"^please\s+(?P<verb>[a-z]+)\s+(?P<rest>.+)$", re.I), _please),
]
