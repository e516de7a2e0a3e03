"""Consolidation for the `rules` provider: a candidate against the most similar
live memories of its user and scope.

Only memories of the candidate's scope and project can be targets. Among them
the candidate's memory is the one with the same non-empty entity name
(case-insensitive; the most similar text if several), else the one whose text is at least
`SAME_THING` similar. Similarity is the Jaccard index of the two texts' word
sets, without function words, "user", "no longer", "project" and "session".

- a revocation (the candidate says "no longer", as `shared.llm.extraction_rules`
  writes "I no longer ...", "I don't ... anymore" and "forget that ...") →
  DELETED of its memory, NONE if it has none;
- no memory → CREATED with the candidate's text;
- its memory says the same (similarity at least `DUPLICATE`) → NONE;
- otherwise → UPDATED with the candidate's text: the newer statement about the
  same thing wins.
"""

from __future__ import annotations

import re

from shared.llm.base import Action, Candidate, Decision, ExistingMemory
from shared.llm.phrasing import word_set

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


def is_revocation(candidate: Candidate) -> bool:
    return _REVOCATION.search(candidate.text) is not None


def decide(candidate: Candidate, existing: list[ExistingMemory]) -> Decision:
    """What to do with `candidate` (see the module docstring)."""
    target = _its_memory(candidate, existing)
    if is_revocation(candidate):
        return (
            Decision(Action.DELETED, target.id, "") if target else Decision(Action.NONE, None, "")
        )
    if target is None:
        return Decision(Action.CREATED, None, candidate.text)
    if similarity(candidate.text, target.text) >= DUPLICATE:
        return Decision(Action.NONE, target.id, "")
    return Decision(Action.UPDATED, target.id, candidate.text)


def _its_memory(candidate: Candidate, existing: list[ExistingMemory]) -> ExistingMemory | None:
    same_place = [
        m for m in existing if m.scope == candidate.scope and m.project_id == candidate.project_id
    ]
    entity = candidate.entity_name.strip().casefold()
    scored = [(similarity(candidate.text, m.text), m) for m in same_place]
    # An empty entity name says nothing: such memories match by text only.
    same_entity = [
        (s, m) for s, m in scored if entity and m.entity_name.strip().casefold() == entity
    ]
    if same_entity:
        return max(same_entity, key=lambda pair: pair[0])[1]
    similar = [(s, m) for s, m in scored if s >= SAME_THING]
    if similar:
        return max(similar, key=lambda pair: pair[0])[1]
    return None
