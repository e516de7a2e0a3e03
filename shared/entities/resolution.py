"""Which known entity a new mention is, if any: resolution without duplicates.

Tried in order, among the entities of the same app, user and project whose kind
agrees (the same, or either `other`); where several qualify, the most recently
seen wins:

1. `name`: the normalised name is one of an entity's aliases;
2. `nickname`: it is, with its first word read as a nickname or the name a
   nickname stands for ("Bob Smith" → "Robert Smith"; the `nicknames` dataset);
3. `first name`: a one-word name is the first word of an entity's name ("Dana"
   → "Dana Lee");
4. `full name`: a longer name starts with a one-word entity's name and no other
   entity has that first word ("Dana Lee" → "Dana"; not when a "Dana Smith" is
   known: two people);
5. `similar`: a spelling near an alias (a typo, "Jonathon" → "Jonathan"): the
   cosine of the names' `hash` embeddings (their words and character 3-grams)
   at least `SIMILAR_COSINE`, or their edit similarity at least `SIMILAR_EDIT`,
   word for word, the first letters equal.

Else the mention is a new entity. A model provider's judgement, where the
extraction gave one, comes before these (`shared.entities.judging`). Pure code:
the caller reads the known entities under the user's lock and writes what this
decides.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache

from nicknames import NickNamer

from shared.embeddings.hashing import HashEmbedder
from shared.entities.names import normalise

# Why an alias was taken, when it may not hold for the next mention of the name: a
# rule that may be wrong (a first name, a full name, a similar spelling) or a
# model's judgement of one mention in its context. A name that is such an alias
# only is asked about again (`shared.entities.judging`).
UNSURE = ("first name", "full name", "similar", "model")
SIMILAR_COSINE = 0.75
SIMILAR_EDIT = 0.8
# Words shorter than this are never taken for a typo of another ("Li", "Lee").
SIMILAR_MIN_LENGTH = 4


@dataclass(frozen=True)
class Known:
    """An entity resolution may answer with: its aliases normalised."""

    id: str
    name: str
    kind: str
    aliases: tuple[str, ...]
    last_seen: datetime
    first_seen: datetime | None = None
    # Its aliases taken for an `UNSURE` reason: what a model may be asked about.
    weak: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resolved:
    """The entity a mention is (`entity` None: a new one) and by which rule."""

    entity: Known | None
    how: str


def kinds_agree(a: str, b: str) -> bool:
    return a == b or "other" in (a, b)


@cache
def _namer() -> NickNamer:
    return NickNamer()  # reads its dataset once


@cache
def nickname_forms(word: str) -> frozenset[str]:
    """The nicknames of a first name and the names a nickname stands for."""
    return frozenset(_namer().nicknames_of(word) | _namer().canonicals_of(word))


def _latest(found: list[Known]) -> Known | None:
    return max(found, key=lambda e: (e.last_seen, e.id)) if found else None


def resolve(name: str, kind: str, known: Sequence[Known]) -> Resolved:
    """The entity `name` (of `kind`) is among `known`, and how it was found."""
    key = normalise(name)
    words = key.split()
    if not words:
        return Resolved(None, "new")
    fitting = [e for e in known if kinds_agree(e.kind, kind)]
    exact = [e for e in fitting if key in e.aliases]
    if exact:
        return Resolved(_latest(exact), "name")
    forms = {" ".join([form, *words[1:]]) for form in nickname_forms(words[0])}
    by_nickname = [e for e in fitting if forms & set(e.aliases)]
    if by_nickname:
        return Resolved(_latest(by_nickname), "nickname")
    if len(words) == 1:
        firsts = {words[0]} | nickname_forms(words[0])
        by_first = [
            e
            for e in fitting
            if any(len(a.split()) > 1 and a.split()[0] in firsts for a in e.aliases)
        ]
        if by_first:
            return Resolved(_latest(by_first), "first name")
    else:
        single = [e for e in fitting if words[0] in e.aliases and len(e.name.split()) == 1]
        others = [
            e
            for e in fitting
            if len(e.name.split()) > 1 and normalise(e.name).split()[0] == words[0]
        ]
        if single and not others:
            return Resolved(_latest(single), "full name")
    similar = [e for e in fitting if any(similar_names(key, a) for a in e.aliases)]
    if similar:
        return Resolved(_latest(similar), "similar")
    return Resolved(None, "new")


def similar_names(a: str, b: str) -> bool:
    """Are two normalised names one name spelt two ways? Word for word, with the
    same number of words and first letters, each pair equal or long enough and
    close enough (hash-embedding cosine or edit similarity)."""
    left, right = a.split(), b.split()
    if len(left) != len(right) or a == b:
        return a == b
    for x, y in zip(left, right, strict=True):
        if x == y:
            continue
        if x[0] != y[0] or min(len(x), len(y)) < SIMILAR_MIN_LENGTH:
            return False
        edit = difflib.SequenceMatcher(None, x, y).ratio()
        # Far apart in spelling is never near in 3-grams: the embedding only for the rest.
        if edit < SIMILAR_EDIT and (edit < 0.5 or _cosine(x, y) < SIMILAR_COSINE):
            return False
    return True


@cache
def _embedder() -> HashEmbedder:
    return HashEmbedder(256)


def _cosine(a: str, b: str) -> float:
    va, vb = _embedder().embed([a, b])
    return sum(x * y for x, y in zip(va, vb, strict=True)) / (
        math.sqrt(sum(x * x for x in va)) * math.sqrt(sum(y * y for y in vb)) or 1.0
    )
