"""What a read may call an entity: the names the rows it sees gave it.

An entity is its user's, but its name and aliases were taken from the texts that
mention it, and a read as one agent does not see another agent's memories and
turns (`shared.memory.agents`). A read that sees every mention is shown the
entity as it is. Otherwise it is shown only the aliases that one of the mentions
it sees says (compared normalised), and the entity's name if one of those says
it, else the fullest of those aliases: "Dana Lee" in another agent's memory
never reaches an agent whose own memories only say "Dana".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from shared.entities.names import normalise


class Alias(NamedTuple):
    """One of an entity's names: as said, normalised, and why it was taken."""

    alias: str
    normalised: str
    how: str


@dataclass(frozen=True)
class Shown:
    name: str
    aliases: tuple[Alias, ...]  # in alias order


def shown(name: str, aliases: Sequence[Alias], surfaces: Iterable[str], hidden: bool) -> Shown:
    """The entity `name` with `aliases` as a read sees it: `surfaces` are the names
    the mentions it sees say; `hidden`: some mention is one it does not see."""
    ordered = tuple(sorted(aliases, key=lambda a: a.alias))
    if not hidden:
        return Shown(name, ordered)
    said = {normalise(s) for s in surfaces}
    kept = tuple(a for a in ordered if a.normalised in said)
    if normalise(name) in said:
        return Shown(name, kept)
    # No alias the read sees: nothing to call it by (a fact's entity whose every
    # mention is another agent's; a fact's source memory names it, so not met).
    fullest = max(kept, key=lambda a: (len(a.normalised.split()), len(a.alias)), default=None)
    return Shown(fullest.alias if fullest else "", kept)
