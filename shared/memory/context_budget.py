"""How the context fills what its budget has left once the pinned rules, the
session's summary and its recent turns are in: the memories, the recalled turns
and the long-term summaries, chosen together by one rule (docs/design.md, "The
context's budget").

Each candidate has a relevance: the reciprocal of its rank in its own ranking
(1 for the best memory, 1/2 for the second; the same for recalled turns), a
neighbouring turn half its hit's per turn of distance, a long-term summary
brought by the period the query names 1. Until nothing more fits, the candidate
with the most relevance per token is taken, its relevance first scaled by
`SPREAD` for each hit already taken from the same session, so that one session
cannot fill the budget. A candidate's tokens are its line's plus, for the first
of its section or of its session, the heading it brings; a neighbouring turn
waits for its hit. A section's cap bounds its tokens, headings included.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from shared.tokens import estimate_tokens

# Each hit already taken from a session scales the next one's relevance by this.
SPREAD = 0.75
# A neighbouring turn's relevance, against its hit's, per turn of distance.
NEIGHBOUR = 0.5


@dataclass(frozen=True, slots=True)
class Candidate:
    """Something the context may carry, as the line it adds to its section."""

    section: str
    key: str  # what it is (a memory or an episode id): taken once
    relevance: float
    line: str
    group: str = ""  # the heading it sits under in its section ("" none): its session's
    needs: str = ""  # a candidate that must be taken first (a neighbouring turn's hit)
    spread: str = ""  # the session it counts against ("" none)
    counted: bool = True  # left out, it counts in `omitted` (a neighbouring turn does not)


def piece(text: str) -> int:
    """The tokens a line adds to the instruction: itself and the line break before it.
    The estimator never counts a whole as more than its parts, so a sum of pieces
    bounds the text they make."""
    return estimate_tokens("\n" + text)


@dataclass
class Chosen:
    taken: list[Candidate] = field(default_factory=list)
    tokens: int = 0
    by_section: Counter[str] = field(default_factory=Counter)

    def omitted(self, candidates: Iterable[Candidate]) -> Counter[str]:
        keys = {c.key for c in self.taken}
        return Counter(c.section for c in candidates if c.counted and c.key not in keys)


def choose(
    candidates: list[Candidate],
    room: int,
    titles: Mapping[str, str],
    caps: Mapping[str, int],
) -> Chosen:
    """The candidates taken within `room` tokens and each section's cap, by the rule
    above (ties: the earlier candidate). `titles`: each section's heading line."""
    chosen = Chosen()
    keys: set[str] = set()
    groups: set[str] = set()
    hits_of: Counter[str] = Counter()
    left = list(candidates)
    while left:
        best, best_value, best_cost = None, 0.0, 0
        for c in left:
            if c.needs and c.needs not in keys:
                continue
            cost = _cost(c, chosen.by_section, groups, titles)
            cap = caps.get(c.section)
            if cost > room - chosen.tokens or (
                cap is not None and chosen.by_section[c.section] + cost > cap
            ):
                continue
            value = (
                c.relevance * SPREAD ** hits_of[c.spread] / cost
                if c.spread
                else (c.relevance / cost)
            )
            if value > best_value:
                best, best_value, best_cost = c, value, cost
        if best is None:
            break
        left.remove(best)
        chosen.taken.append(best)
        chosen.tokens += best_cost
        chosen.by_section[best.section] += best_cost
        keys.add(best.key)
        if best.group:
            groups.add(best.group)
        if best.spread and best.counted:
            hits_of[best.spread] += 1
    return chosen


def _cost(
    c: Candidate, by_section: Counter[str], groups: set[str], titles: Mapping[str, str]
) -> int:
    cost = piece(c.line)
    if not by_section[c.section]:
        cost += estimate_tokens("\n\n" + titles[c.section])
    if c.group and c.group not in groups:
        cost += piece(c.group)
    return cost
