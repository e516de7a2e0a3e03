"""The words `shared.llm.offline.clauses` reads a statement with: the verb phrases of each
predicate (synonyms share one), the change verbs, the predicates a subject has one
value of at a time, and the words that name a time. All lowercase."""

from __future__ import annotations

import re

from shared.llm.offline.phrasing import word_set

# predicate → the verb phrases that state it. A copula ("is", "are") is read
# further by its value (`BY_VALUE`).
PREDICATES: dict[str, tuple[str, ...]] = {
    "use": (
        "uses",
        "use",
        "is using",
        "are using",
        "relies on",
        "rely on",
        "runs on",
        "run on",
        "runs",
        "run",
        "is built with",
        "are built with",
        "builds with",
        "build with",
        "works with",
        "work with",
        "is written in",
        "are written in",
        "codes in",
        "code in",
    ),
    "is on": ("is on", "are on"),
    "location": (
        "lives in",
        "live in",
        "lives at",
        "is living in",
        "are living in",
        "resides in",
        "reside in",
        "is based in",
        "are based in",
        "is located in",
        "are located in",
        "stays in",
    ),
    "when": (
        "is due on",
        "is due by",
        "is due",
        "are due",
        "is scheduled for",
        "is scheduled on",
        "are scheduled for",
        "is set for",
        "is planned for",
        "falls on",
        "takes place on",
        "is held on",
    ),
    "employer": (
        "works at",
        "work at",
        "works for",
        "work for",
        "is working at",
        "is working for",
        "is employed at",
        "is employed by",
    ),
    "prefer": (
        "prefers",
        "prefer",
        "likes",
        "like",
        "loves",
        "love",
        "enjoys",
        "enjoy",
        "favours",
        "favors",
        "would rather",
    ),
    "have": ("has", "have", "owns", "own"),
    "be": ("is", "are"),
}

# A change verb → the predicate whose value it changes (`BY_VALUE` when it
# depends on the value: "moved to Monday" is a date, "moved to Berlin" a place).
CHANGE_VERBS: dict[str, str] = {
    "moved": "moved",
    "relocated": "location",
    "switched": "switched",
    "migrated": "use",
    "changed": "be",
    "postponed": "when",
    "pushed": "when",
    "rescheduled": "when",
    "delayed": "when",
    "brought": "when",
    "bumped": "when",
}
# What may stand before a change verb ("has been moved to") and after it.
_AUXILIARIES: tuple[str, ...] = ("", "has", "have", "had", "has been", "have been", "had been")
_AUXILIARIES += ("is", "was", "are", "were", "got", "gets")
_PARTICLES = ("", "back", "forward", "over")
# What follows a change verb: its new value ("to Monday"), or the old one first.
CHANGE_PARTICLES = word_set("to until till for from")

# A verb whose predicate its value decides → (the predicate when the value is a
# time, else): "is on Monday", "is on Kubernetes".
BY_VALUE: dict[str, tuple[str, str]] = {
    "be": ("when", "be"),
    "is on": ("when", "use"),
    "moved": ("when", "location"),
    "switched": ("when", "use"),
}

# A subject has one value of these at a time: a new one replaces the old. "be"
# too, for some subjects only (`clauses._one_at_a_time`): "the cache is Redis",
# but "Alice is tall" and "Alice is a runner" may both hold.
SINGLE_VALUED = frozenset({"location", "when", "employer"})


def _verb_phrases() -> list[tuple[tuple[str, ...], str, bool]]:
    phrases = [
        (tuple(phrase.split()), predicate, False)
        for predicate, verbs in PREDICATES.items()
        for phrase in verbs
    ]
    phrases += [
        (tuple(f"{aux} {verb} {particle}".split()), predicate, True)
        for verb, predicate in CHANGE_VERBS.items()
        for aux in _AUXILIARIES
        for particle in _PARTICLES
    ]
    # Longest first: "is using" before "is", "was moved" before "was".
    return sorted(phrases, key=lambda p: -len(p[0]))


VERB_PHRASES = _verb_phrases()
# Every predicate a clause of the lexicon can have.
PREDICATE_NAMES = (
    frozenset(PREDICATES)
    | frozenset(CHANGE_VERBS.values())
    | frozenset(p for pair in BY_VALUE.values() for p in pair)
    | {"is a"}
)

# Markers that say nothing about the value.
FILLER = word_set("currently still also actually really just presently")
DETERMINERS = word_set("the a an my our their his her its your this that these those")
# The user, however a statement names them.
THE_USER = word_set("i we user users me us")
PRONOUNS = word_set("it this that there these those he she they you what which who here them")
# A subject never ends with these: the verb cannot follow ("the use of tabs").
NOT_SUBJECT_END = DETERMINERS | word_set("of for in on at to with by from and or as")
# Nor holds these: the clause is a rule, a negation or a modal, no plain value.
NOT_IN_SUBJECT = word_set(
    "not don't doesn't didn't won't can't cannot never always usually often sometimes "
    "rarely must should may might could would will can shall do does did"
)
# What a value starts with that is not the value: "in Berlin", "to Monday", "a dog".
VALUE_LEADS = word_set("in at on to for by until till the a an")
# A value's first phrase ends at these ("python 3.11 with postgresql").
PHRASE_ENDS = word_set("with on for in at and or over of from via as but instead to")
# A number or a version ("12", "3.11", "v2", "2nd"), or a small number in words.
NUMBER = re.compile(
    r"^(?:v?\d[\w.+-]*|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)$"
)

_DAYS = "monday tuesday wednesday thursday friday saturday sunday"
_MONTHS = (
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec"
)
TIME_WORDS = word_set(
    f"{_DAYS} {' '.join(d + 's' for d in _DAYS.split())} {_MONTHS} "
    "today tomorrow tonight yesterday noon midnight eod morning afternoon evening "
    "week weekend month quarter year sprint q1 q2 q3 q4"
)
# Before a time word: "on", "next", "end of".
TIME_LEADS = word_set("on at by until till for in the this next coming end of early late mid")
# 2026-03-01, 3/14, 14:00, 3pm, 9am, 21st.
TIME_FORM = re.compile(
    r"^(?:\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}(?:/\d{2,4})?|\d{1,2}(?::\d{2})?(?:am|pm)|"
    r"\d{1,2}:\d{2}|\d{1,2}(?:st|nd|rd|th))$"
)
