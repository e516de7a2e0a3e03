"""The entities a text names, read by plain rules (no model): every provider's
memories and every archived turn get theirs from here, and a model provider's
own entities (named in its extraction reply) come on top.

A name is a run of capitalised words ("Dana", "Dana Lee", "Acme Corp", "New
York"), without the function words, pronouns, days and months that start a
sentence or a run ("The", "My", "Monday"), and without a possessive ("Dana's"
→ "Dana"). Its kind comes from the words around it: "project X" or "X project"
a project; "my dog X" a pet; "at/for/joined X" with an organisation's suffix,
or such a suffix alone, an organisation; "in/to/from X" after a move or a stay
a place; a conference, wedding or trip an event; "uses/switched to X" a tool;
a known first name (the `nicknames` dataset), or a name after "my sister"
or before "said", "moved", a person; else `other`.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache


def word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


KINDS = ("person", "organisation", "project", "place", "tool", "pet", "event", "other")

# A word (with its contraction: "Don't" is no Don) or a run of other characters.
_TOKEN = re.compile(r"[A-Za-zÀ-ÿ][\w&.+-]*(?:['’][a-z]+)?|[^\sA-Za-zÀ-ÿ]+")
_SENTENCE_END = re.compile(r"[.!?:;]$")

# Capitalised for another reason than being a name.
_NOT_NAMES = word_set(
    """i i'm i've i'd i'll we we're we've you your he she it they them their our my me
    the a an this that these those there here what when where which who why how
    yes no hi hello hey thanks thank ok okay sure great cool nice good well so and but
    or also then now today tomorrow yesterday tonight please maybe just let lets
    monday tuesday wednesday thursday friday saturday sunday january february march
    april june july august september october november december user assistant
    remember note for in on at to from with by of after before since during as if
    is are was were be been do does did have has had can could will would should may
    might must not never always sometimes usually all any some every each both
    last next first one two three his her its our us"""
)
_ORG_SUFFIXES = word_set(
    """inc ltd llc gmbh corp corporation company co labs lab university bank group
    institute foundation agency studio studios"""
)
_EVENT_WORDS = word_set(
    "conference summit wedding festival meetup hackathon offsite trip party retreat"
)
_PET_WORDS = word_set("dog cat puppy kitten parrot hamster rabbit pet horse")
_PLACE_LEADS = word_set("in to from near visiting visit moved lives live living")
_ORG_LEADS = word_set("at joined join for")
_TOOL_LEADS = word_set("use uses using used switched adopted migrated")
_PERSON_LEADS = word_set(
    """sister brother friend manager colleague boss wife husband partner mom dad mother
    father son daughter cousin aunt uncle neighbour neighbor coworker mentor met"""
)
_PERSON_VERBS = word_set(
    """said says told asks asked works worked moved lives lived met joined likes loves
    wants prefers started left visited called emailed"""
)


@dataclass(frozen=True)
class Mention:
    """A name as a text says it, and the kind of thing it names."""

    name: str
    kind: str
    # False for one word of no known kind that opens a sentence ("Huh, okay.",
    # "Pixel ate it"): capitalised as any first word is, it names an entity only
    # if one of that name is known already.
    sure: bool = True


def normalise(name: str) -> str:
    """Lowercase, without accents, possessives or punctuation, one space between
    words: the form names are compared in."""
    decomposed = unicodedata.normalize("NFKD", name)
    plain = "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
    plain = re.sub(r"'s\b", "", plain)
    return " ".join(re.sub(r"[^\w\s&+-]", " ", plain).split())


@cache
def _first_names() -> frozenset[str]:
    from nicknames import name_triplets

    return frozenset(name for triplet in name_triplets() for name in (triplet[0], triplet[2]))


def is_first_name(word: str) -> bool:
    return normalise(word) in _first_names()


def mentions(text: str) -> list[Mention]:
    """The names `text` says, each once, in order of first mention."""
    tokens = _TOKEN.findall(text)
    found: dict[str, Mention] = {}
    i = 0
    while i < len(tokens):
        if not _capitalised(tokens[i]):
            i += 1
            continue
        start = i
        run: list[str] = []
        while i < len(tokens) and _capitalised(tokens[i]):
            word = tokens[i]
            run.append(word)
            i += 1
            if word.endswith("'s") or _SENTENCE_END.search(word):
                break
        words = [w[:-2] if w.endswith("'s") else w for w in run]
        words = [w.rstrip(".") for w in words]
        while words and _not_name(words[0]):
            words.pop(0)
            start += 1
        while words and _not_name(words[-1]):
            words.pop()
        if not words:
            continue
        name = " ".join(words)
        key = normalise(name)
        if key and key not in found:
            before = [normalise(t) for t in _lead(tokens, start)]
            after = normalise(tokens[i]) if i < len(tokens) else ""
            kind = _kind(words, before, after)
            opens = start == 0 or bool(_SENTENCE_END.search(tokens[start - 1]))
            sure = not (opens and len(words) == 1 and kind == "other")
            found[key] = Mention(name, kind, sure)
    return list(found.values())


def _lead(tokens: list[str], start: int) -> list[str]:
    """Up to three tokens before `start`, within its sentence: the words of the
    sentence before ("lives in Paris.") say nothing of the next one's first word."""
    lead = tokens[max(0, start - 3) : start]
    ends = [n for n, token in enumerate(lead) if _SENTENCE_END.search(token)]
    return lead[ends[-1] + 1 :] if ends else lead


def _not_name(word: str) -> bool:
    """A word capitalised for another reason ("Fridays" as "Friday")."""
    plain = normalise(word)
    return plain in _NOT_NAMES or plain.removesuffix("s") in _NOT_NAMES


def _capitalised(token: str) -> bool:
    contracted = ("'" in token or "’" in token) and not token.endswith(("'s", "’s"))
    return token[:1].isupper() and not contracted


def _kind(words: list[str], before: list[str], after: str) -> str:
    lowered = [normalise(w) for w in words]
    last_before = before[-1] if before else ""
    if last_before == "project" or after == "project":
        return "project"
    if any(w in _PET_WORDS for w in before[-2:]):
        return "pet"
    if lowered[-1] in _ORG_SUFFIXES:
        return "organisation"
    if lowered[-1] in _EVENT_WORDS or after in _EVENT_WORDS:
        return "event"
    if last_before in _TOOL_LEADS or (len(before) > 1 and before[-2] in _TOOL_LEADS):
        return "tool"
    person_cue = last_before in _PERSON_LEADS or after in _PERSON_VERBS | _PERSON_LEADS
    if len(words) <= 3 and (is_first_name(lowered[0]) or person_cue):
        return "person"
    if last_before in _ORG_LEADS:
        return "organisation"
    if last_before in _PLACE_LEADS or (len(before) > 1 and before[-2] in _PLACE_LEADS):
        return "place"
    return "other"
