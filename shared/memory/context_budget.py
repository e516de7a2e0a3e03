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
    opened: set[str] = set()  # the sections and groups already headed
    hits_of: Counter[str] = Counter()
    # Each candidate's own tokens and those of the headings it may bring, once.
    lines = [piece(c.line) for c in candidates]
    headings = {name: estimate_tokens("\n\n" + title) for name, title in titles.items()}
    groups = {c.group: piece(c.group) for c in candidates if c.group}
    left = list(range(len(candidates)))
    while left:
        best, best_value, best_cost = -1, 0.0, 0
        for i in left:
            c = candidates[i]
            if c.needs and c.needs not in keys:
                continue
            cost = lines[i]
            if c.section not in opened:
                cost += headings[c.section]
            if c.group and c.group not in opened:
                cost += groups[c.group]
            cap = caps.get(c.section)
            if cost > room - chosen.tokens or (
                cap is not None and chosen.by_section[c.section] + cost > cap
            ):
                continue
            value = c.relevance / cost
            if c.spread:
                value *= SPREAD ** hits_of[c.spread]
            if value > best_value:
                best, best_value, best_cost = i, value, cost
        if best < 0:
            break
        left.remove(best)
        taken = candidates[best]
        chosen.taken.append(taken)
        chosen.tokens += best_cost
        chosen.by_section[taken.section] += best_cost
        keys.add(taken.key)
        opened.update((taken.section, taken.group))
        if taken.spread and taken.counted:
            hits_of[taken.spread] += 1
    return chosen
