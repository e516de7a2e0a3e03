"""Statements for the `offline` provider's extraction: one clause of the user's text,
matched against these patterns in this order (case-insensitive), gives the
memories it states (`Stated`: entity, kind, third-person text, no period).

| pattern | kind | memory |
|---|---|---|
| remember/note/keep in mind (that) X | X's, else fact | X ("S is X" counts for any S) |
| forget (that/about) X | X's | X revoked ("User no longer ...") |
| I no longer V X, I don't V X anymore | preference (1), else fact | User no longer Vs X |
| I don't like/want/use/enjoy/love X | preference | User does not V X |
| I've switched (from W) to X, I'm moving to X | preference | User prefers X |
| I now/currently use X | preference | User now uses X |
| I prefer/like/love/enjoy/favour/hate X | preference | User prefers X |
| I'd rather X, I'd prefer X | preference | User would rather X |
| I always/never/usually V X | rule (usually: preference) | User always Vs X |
| always/never V X (to the assistant) | rule | User wants the assistant to always V X |
| S must/must not/should/cannot/may not V X | rule | S must V X |
| my/our S is X | fact | User's S is X |
| the S is/are X | fact (2) | The S is X |
| (after "from now on") I V X, use X | preference | User Vs X |

(1) when V is prefer, like, love, enjoy, use, want. (2) only when S names a
facet ("the region"), the sentence names a project, or a rule word is there.
"moved/migrated to X" counts only when X names a facet ("I've moved to Berlin"
is no preference). A clause longer than `MAX_CLAUSE_CHARS` states nothing.

Kind: a rule word anywhere in the clause (must, never, always, cap, capped,
limit, at most, at least, no more than, maximum, minimum, cannot, not allowed,
forbidden, required) makes it a rule; a fact that says "prefer", "favourite" or
"rather" is a preference. The offline provider never writes an "event".

A preference about several things ("I prefer Dark Mode UI and standardizing on
Python 3.11 with PostgreSQL") gives one memory per item when every item names a
different facet of `shared.llm.offline.facets`, else one memory; entity names come from
that module.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from shared.llm.offline.facets import (
    noun_phrase,
    subject_entity,
    subject_facet,
    tokens,
    value_entity,
    value_facet,
)
from shared.llm.offline.phrasing import first_person, negate, subject_text, third, verb3, word_set
from shared.llm.offline.self_statements import PATTERNS as SELF_STATEMENTS
from shared.llm.offline.stated import Reading, Stated

_RULE_WORDS = re.compile(
    r"\b(?:must|mustn't|never|always|caps?|capped|limits?|limited|maximum|minimum|cannot|"
    r"can't|forbidden|required|at\s+most|at\s+least|no\s+more\s+than|not\s+allowed)\b",
    re.I,
)
_PREFERENCE_WORDS = re.compile(r"\b(?:prefer\w*|favou?rite|rather)\b", re.I)

# A longer clause is no statement to remember (and the patterns' cost stays bounded).
MAX_CLAUSE_CHARS = 400
# Words that open a clause and state nothing.
LEAD = re.compile(
    r"^(?:(?:and|but|so|also|plus|then|oh|ok|okay|well|btw|by\s+the\s+way|fyi|"
    r"just\s+so\s+you\s+know|as\s+a\s+rule)\b[,:]?\s*)+",
    re.I,
)

# A few words and a colon that announce a statement ("Heads up: ...", "Small update:
# ..."), unless they are a pattern's own ("Remember: ...").
LEAD_IN = re.compile(r"^(?:[A-Za-z]+\s+){0,2}[A-Za-z]+:\s+")
_KEEPS_ITS_LEAD = re.compile(r"^(?:please\s+)?(?:remember|note|forget|keep\s+in\s+mind)\b", re.I)

_ADVERBS = (
    r"(?:(?:really|also|still|generally|usually|strongly|definitely|actually|much|mostly|do|"
    r"personally|just)\s+)*"
)
_PREFERENCE_VERBS = word_set("prefer like love enjoy use want favor favour")
_PRONOUN_SUBJECTS = word_set(
    "it this that there these those he she they what which who how here you i we"
)
# Subjects of "the S is X" that say nothing about the project the turn is of.
_NOT_ABOUT_A_PROJECT = word_set(
    "problem issue question thing point idea difference reason answer result error plan way "
    "trick catch goal option choice weather day time"
)
_GENERIC_VERBS = word_set("use using write add put keep run make have do be follow apply")
# Words a verb phrase's entity skips: "never be capped at" → "capped".
_VP_SKIPPED = _GENERIC_VERBS | word_set("never always ever not only also")
# A lasting change: with it, "I use X" and "use X" state a preference.
FROM_NOW_ON = re.compile(r"\bfrom\s+now\s+on\b,?", re.I)


def claims(clause: str, context: Reading) -> list[Stated]:
    """What `clause` states (see the module docstring); nothing for chatter."""
    clause = LEAD.sub("", clause).strip(" ,;:")
    if not _KEEPS_ITS_LEAD.match(clause):
        clause = LEAD_IN.sub("", clause)
    if not clause or len(clause) > MAX_CLAUSE_CHARS:
        return []
    for pattern, handler in _PATTERNS:
        match = pattern.search(clause)
        if match:
            found = handler(match, context)
            if found is not None:  # None: the pattern matched but declines
                return found
    if context.from_now_on:
        return _from_now_on(FROM_NOW_ON.sub("", clause).strip(" ,"))
    return []


def _from_now_on(clause: str) -> list[Stated]:
    """A lasting change with no pattern of its own: "from now on, I use tabs" →
    "User uses tabs"; "from now on, use tabs" → "User wants the assistant to use
    tabs"."""
    match = re.match(r"^(?:i|we)(?:'ll|\s+will)?\s+(?P<verb>[a-z]+)\s+(?P<obj>.+)$", clause, re.I)
    if match:
        text = f"User {verb3(match['verb'])} {third(match['obj'])}"
        return [Stated(value_entity(match["obj"]), _kind(clause, "preference"), text)]
    match = re.match(r"^(?:please\s+)?(?P<verb>[a-z]+)\s+(?P<obj>.+)$", clause, re.I)
    if match and match["verb"].lower() in _GENERIC_VERBS:
        text = f"User wants the assistant to {third(clause[:1].lower() + clause[1:])}"
        return [Stated(_vp_entity(clause), _kind(clause, "preference"), text)]
    return []


def _kind(text: str, default: str) -> str:
    if _RULE_WORDS.search(text):
        return "rule"
    if default == "fact" and _PREFERENCE_WORDS.search(text):
        return "preference"
    return default


def _vp_entity(phrase: str) -> str:
    """The entity of a verb phrase: its facet, else its object ("use type hints"
    → "type hint"), else the phrase."""
    words = tokens(phrase)
    while words and words[0].lower() in _VP_SKIPPED:
        words = words[1:]
    return value_facet(phrase) or noun_phrase(" ".join(words)) or noun_phrase(phrase)


def _items(value: str) -> list[str]:
    return [i for i in re.split(r"\s*,\s*(?:and\s+)?|\s+and\s+", value) if i.strip()]


# -- the patterns -------------------------------------------------------------
Handler = Callable[[re.Match[str], Reading], list[Stated] | None]


def _remember(match: re.Match[str], context: Reading) -> list[Stated] | None:
    rest = match["rest"]
    inner = claims(rest, replace(context, remember=True))
    if inner:
        return inner
    return [Stated(_vp_entity(_without_subject(rest)), _kind(rest, "fact"), first_person(rest))]


def _forget(match: re.Match[str], context: Reading) -> list[Stated] | None:
    rest = match["rest"]
    inner = claims(rest, replace(context, remember=True)) or [
        Stated(_vp_entity(_without_subject(rest)), _kind(rest, "fact"), first_person(rest))
    ]
    return [replace(claim, text=negate(claim.text)) for claim in inner]


def _no_longer(match: re.Match[str], context: Reading) -> list[Stated] | None:
    verb, obj = match["verb"].lower(), match["obj"]
    kind = "preference" if verb in _PREFERENCE_VERBS else _kind(obj, "fact")
    return [Stated(value_entity(obj), kind, f"User no longer {verb3(verb)} {third(obj)}")]


def _do_not(match: re.Match[str], context: Reading) -> list[Stated] | None:
    verb, obj = match["verb"].lower(), match["obj"]
    return [Stated(value_entity(obj), "preference", f"User does not {verb} {third(obj)}")]


def _switched(match: re.Match[str], context: Reading) -> list[Stated] | None:
    obj = match["obj"]
    if match["verb"].lower().startswith(("mov", "migrat")) and value_facet(obj) is None:
        return None  # "I've moved to Berlin" is no choice of tool
    return [Stated(value_entity(obj), _kind(obj, "preference"), f"User prefers {third(obj)}")]


def _now_uses(match: re.Match[str], context: Reading) -> list[Stated] | None:
    obj = match["obj"]
    text = f"User now {verb3(match['verb'])} {third(obj)}"
    return [Stated(value_entity(obj), _kind(obj, "preference"), text)]


def _prefers(match: re.Match[str], context: Reading) -> list[Stated] | None:
    verb, would, obj = match["verb"].lower(), match["would"], match["obj"]
    if verb == "rather" and not would:
        return None
    if would and verb not in ("prefer", "rather"):
        return None  # "I'd like a summary" asks for something; it states no preference
    phrase = f"would {verb}" if would else verb3(verb)
    kind = _kind(match.string, "preference")
    items = _items(obj)
    facets = [value_facet(item) for item in items]
    if len(items) > 1 and all(facets) and len(set(facets)) == len(items):
        return [
            Stated(facet, kind, f"User {phrase} {third(item)}")
            for item, facet in zip(items, facets, strict=True)
            if facet is not None
        ]
    return [Stated(value_entity(obj), kind, f"User {phrase} {third(obj)}")]


def _always(match: re.Match[str], context: Reading) -> list[Stated] | None:
    adverb, verb, rest = match["adv"].lower(), match["verb"], match["rest"]
    kind = "rule" if adverb in ("always", "never") else _kind(rest, "preference")
    text = f"User {adverb} {verb3(verb)} {third(rest)}"
    return [Stated(_vp_entity(f"{verb} {rest}"), kind, text)]


def _imperative(match: re.Match[str], context: Reading) -> list[Stated] | None:
    adverb, rest = match["adv"].lower(), match["rest"]
    if rest.lower().startswith("mind"):
        return None  # "never mind"
    text = f"User wants the assistant to {adverb} {third(rest)}"
    return [Stated(_vp_entity(rest), "rule", text)]


def _must(match: re.Match[str], context: Reading) -> list[Stated] | None:
    subject, modal, rest = match["subj"], match["modal"].lower(), match["rest"]
    low = subject.lower()
    if low in ("i", "we", "you"):
        entity = _vp_entity(rest)
    elif low.split()[0] in _PRONOUN_SUBJECTS:
        return None
    else:
        entity = subject_entity(subject, rest)
    return [Stated(entity, "rule", f"{subject_text(subject)} {modal} {third(rest)}")]


def _my(match: re.Match[str], context: Reading) -> list[Stated] | None:
    subject, copula, value = match["subj"], match["cop"].lower(), match["val"]
    text = f"User's {third(subject)} {copula} {third(value)}"
    return [Stated(subject_entity(subject, value), _kind(match.string, "fact"), text)]


def _copula(match: re.Match[str], context: Reading) -> list[Stated] | None:
    subject, copula, value = match["subj"], match["cop"].lower(), match["val"]
    if subject.split()[0].lower() in _PRONOUN_SUBJECTS:
        return None
    worth = (
        context.project_stated
        or context.remember
        or subject_facet(subject, value) is not None
        or _RULE_WORDS.search(match.string) is not None
        # "polars is my go-to": the value is the user's own.
        or re.match(r"(?:my|our)\b", value, re.I) is not None
        # A project's turn: "the forecast horizon is 28 days" is about the project.
        or (context.in_project and subject.split()[-1].lower() not in _NOT_ABOUT_A_PROJECT)
    )
    if not worth:
        return None
    text = f"{third(subject)} {copula} {third(value)}"
    return [Stated(subject_entity(subject, value), _kind(match.string, "fact"), text)]


def _without_subject(clause: str) -> str:
    """A first-person clause without its "I <verb>" ("I have two monitors" → "two
    monitors"); other clauses unchanged."""
    match = re.match(r"^(?:i|we)(?:'m|'re|'ve|'d|'ll|\s+[a-z]+)\s+(.*)$", clause, re.I)
    return match[1] if match else clause


_I = r"(?:^|\b)(?:i|we)"
_PATTERNS: list[tuple[re.Pattern[str], Handler]] = [
    (
        re.compile(
            r"^(?:please\s+)?(?:remember|note|keep\s+in\s+mind|don't\s+forget|do\s+not\s+forget)"
            r"(?:\s+that\b|\s*:)?\s*(?P<rest>\S.*)$",
            re.I,
        ),
        _remember,
    ),
    (re.compile(r"^(?:please\s+)?forget\s+(?:that\b|about\b)?\s*(?P<rest>\S.*)$", re.I), _forget),
    (re.compile(rf"{_I}\s+no\s+longer\s+(?P<verb>[a-z]+)\s+(?P<obj>.+)$", re.I), _no_longer),
    (
        re.compile(
            rf"{_I}\s+(?:don't|do\s+not|dont)\s+(?P<verb>[a-z]+)\s+(?P<obj>.+?)\s+any\s?more$",
            re.I,
        ),
        _no_longer,
    ),
    (
        re.compile(
            rf"{_I}\s+(?:don't|do\s+not|dont)\s+(?P<verb>like|want|use|enjoy|love)\s+(?P<obj>.+)$",
            re.I,
        ),
        _do_not,
    ),
    (
        re.compile(
            rf"{_I}(?:'ve|\s+have|'m|\s+am|'re|\s+are)?\s+(?:just\s+|now\s+|finally\s+)?"
            r"(?P<verb>switched|switching|moved|moving|migrated|migrating|changed|changing)\s+"
            r"(?:over\s+)?(?:from\s+.+?\s+)?to\s+(?P<obj>.+)$",
            re.I,
        ),
        _switched,
    ),
    (
        re.compile(
            rf"{_I}\s+(?:now|currently)\s+(?P<verb>use|work\s+with|code\s+in|write|run)\s+"
            r"(?P<obj>.+)$",
            re.I,
        ),
        _now_uses,
    ),
    (
        re.compile(
            rf"{_I}(?P<would>'d|\s+would)?\s+{_ADVERBS}"
            r"(?P<verb>prefer|like|love|enjoy|favou?r|hate|dislike|rather)\s+(?P<obj>.+)$",
            re.I,
        ),
        _prefers,
    ),
    (
        re.compile(
            rf"{_I}\s+(?P<adv>always|never|usually)\s+(?P<verb>[a-z]+)\s+(?P<rest>.+)$", re.I
        ),
        _always,
    ),
    (re.compile(r"^(?:please\s+)?(?P<adv>always|never)\s+(?P<rest>.+)$", re.I), _imperative),
    (
        re.compile(
            r"^(?P<subj>(?:[\w.+#'-]+\s+){0,5}?[\w.+#'-]+)\s+"
            r"(?P<modal>must(?:\s+not|n't)?|cannot|can't|shall(?:\s+not)?|should(?:\s+not|n't)?|"
            r"may\s+not)\s+(?P<rest>.+)$",
            re.I,
        ),
        _must,
    ),
    (
        re.compile(r"^(?:my|our)\s+(?P<subj>.+?)\s+(?P<cop>is|are|was|were)\s+(?P<val>.+)$", re.I),
        _my,
    ),
    (
        re.compile(
            r"^(?P<subj>(?:[\w.+#'-]+\s+){0,4}?[\w.+#'-]+)\s+(?P<cop>is|are)\s+(?P<val>.+)$", re.I
        ),
        _copula,
    ),
]
_PATTERNS += SELF_STATEMENTS
