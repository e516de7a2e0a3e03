"""What the offline extraction reads a clause with (`Reading`: what the sentence
and its turn say around it) and what a clause states (`Stated`: a memory's entity,
kind and third-person text, no final period)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reading:
    project_stated: bool  # the sentence names a project: any "the S is X" counts
    from_now_on: bool = False  # "from now on": "I V X" and "V X" state a preference
    remember: bool = False  # inside "remember that ...": any "S is X" counts
    in_project: bool = False  # the turn is of a project: "the S is X" is of it


@dataclass(frozen=True)
class Stated:
    entity: str
    kind: str
    text: str  # third person, no final period
