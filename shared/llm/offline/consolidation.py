"""Consolidation for the `offline` provider: a candidate against the most similar
live memories of its user and scope.

Only memories of the candidate's scope and project can be targets. Among them
the candidate's memory is, in this order:
1. the one with the same non-empty entity name (case-insensitive; the most
   similar text if several);
2. the one stating the same fact: both texts read as clauses
   (`shared.llm.offline.clauses`) with the same subject and predicate, and either the
   predicate has one value at a time ("lives in", a date, "the cache is"), or the
   values are the same thing (`same_thing`: "gcc 12" and "gcc 14", "vim" and
   "neovim"), or the candidate names the value it replaces ("instead of
   Jenkins", "from Friday to Monday"), or it says it replaces one ("switched
   to", "migrated to") and the subject has that one value of the predicate.
   "Now" alone does not guess: "The team now uses Slack" is no reason to forget
   that it uses Jenkins;
3. else, where either text reads as no clause, the one whose text is at least
   `SAME_THING` similar. When both read as clauses, the clauses decide: "The
   Osprey build uses gcc 12" is not "The Heron build uses gcc 12" however many
   words they share.
Similarity is the Jaccard index of the two texts' word sets, without function
words, "user", "no longer", "project" and "session".

- a revocation (the candidate says "no longer", as `shared.llm.offline.extraction`
  writes "I no longer ...", "I don't ... anymore" and "forget that ..."; its
  memory by clause only when the value is the same thing) → DELETED of its
  memory, NONE if it has none; "no longer X but Y" is a change, not a revocation;
- no memory → CREATED with the candidate's text;
- its memory says the same → NONE: the same subject, predicate and value when
  both read as clauses ("now uses gcc 14" after "uses gcc 14"), else a similarity
  of at least `DUPLICATE`;
- otherwise → UPDATED with the candidate's text: the newer statement about the
  same thing wins.
"""

from __future__ import annotations

import re

from shared.llm.base import Action, Candidate, Decision, ExistingMemory
from shared.llm.offline.clauses import Clause, parse, same_thing
from shared.llm.offline.phrasing import word_set

DUPLICATE = 0.9
SAME_THING = 0.6

_REVOCATION = re.compile(r"\bno\s+longer\b", re.I)
_WORD = re.compile(r"[a-z0-9][\w.+#'-]*")
_IGNORED = word_set(
    "the a an is are was were be of for to in on at and or with by as it its this that "
    "user user's their they them no longer project session"
)


def words(text: str) -> frozenset[str]:
    return frozenset(w.rstrip(".'-") for w in _WORD.findall(text.lower())) - _IGNORED


def similarity(a: str, b: str) -> float:
    """Jaccard index of the word sets of `a` and `b` (1.0 for two empty ones)."""
    left, right = words(a), words(b)
    if not left and not right:
        return 1.0
    return len(left & right) / len(left | right)


def is_revocation(candidate: Candidate, clause: Clause | None = None) -> bool:
    if clause is not None:
        return clause.negated
    return _REVOCATION.search(candidate.text) is not None


def decide(candidate: Candidate, existing: list[ExistingMemory]) -> Decision:
    """What to do with `candidate` (see the module docstring)."""
    mine = [
        m for m in existing if m.scope == candidate.scope and m.project_id == candidate.project_id
    ]
    new = parse(candidate.text)
    target = (
        _same_entity(candidate, mine)
        or _same_fact(candidate, new, mine)
        or _similar(candidate, new, mine)
    )
    if is_revocation(candidate, new):
        return (
            Decision(Action.DELETED, target.id, "") if target else Decision(Action.NONE, None, "")
        )
    if target is None:
        return Decision(Action.CREATED, None, candidate.text)
    if _says_the_same(candidate, new, target):
        return Decision(Action.NONE, target.id, "")
    return Decision(Action.UPDATED, target.id, candidate.text)


def _older(text: str, new: Clause | None) -> Clause | None:
    """An existing memory's text as a clause, read for the candidate's verb."""
    return parse(text, verb=new.predicate) if new is not None else parse(text)


def _same_entity(candidate: Candidate, mine: list[ExistingMemory]) -> ExistingMemory | None:
    # An empty entity name says nothing: such memories match otherwise.
    entity = candidate.entity_name.strip().casefold()
    same = [m for m in mine if entity and m.entity_name.strip().casefold() == entity]
    return _most_similar(candidate, same)


def _same_fact(
    candidate: Candidate, new: Clause | None, mine: list[ExistingMemory]
) -> ExistingMemory | None:
    if new is None:
        return None
    slot = []  # the memories stating a value of the same subject's predicate
    for memory in mine:
        old = _older(memory.text, new)
        if old is not None and (old.subject, old.predicate) == (new.subject, new.predicate):
            slot.append((memory, old))
    if new.negated:
        same = [m for m, old in slot if same_thing(old.value, new.value)]
    else:
        same = [
            m
            for m, old in slot
            if new.single
            or same_thing(old.value, new.value)
            or (new.previous and same_thing(old.value, new.previous))
        ]
        if not same and new.replaces and len(slot) == 1:
            same = [slot[0][0]]  # "switched to X": what it replaced is the one value it had
    return _most_similar(candidate, same)


def _similar(
    candidate: Candidate, new: Clause | None, mine: list[ExistingMemory]
) -> ExistingMemory | None:
    """The most similar memory at least `SAME_THING` similar, of those that a
    clause cannot tell apart (the candidate or the memory reads as none)."""
    similar = [
        m
        for m in mine
        if (new is None or _older(m.text, new) is None)
        and similarity(candidate.text, m.text) >= SAME_THING
    ]
    return _most_similar(candidate, similar)


def _most_similar(candidate: Candidate, memories: list[ExistingMemory]) -> ExistingMemory | None:
    if not memories:
        return None
    return max(memories, key=lambda m: similarity(candidate.text, m.text))


def _says_the_same(candidate: Candidate, new: Clause | None, target: ExistingMemory) -> bool:
    old = _older(target.text, new)
    if new is not None and old is not None:
        return (new.subject, new.predicate, new.value) == (old.subject, old.predicate, old.value)
    return similarity(candidate.text, target.text) >= DUPLICATE
