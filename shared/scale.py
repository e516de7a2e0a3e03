"""`AM_SCALE` and `up --scale`: how many replicas of each worker kind the local
stack runs."""

from __future__ import annotations

from shared.bus.topology import WORKER_KINDS

# Replicas of one kind `agent-memory up` runs on one machine: eight extraction
# replicas with their default pool of 4 connections hold 32 of the local Postgres's 200
# connections.
MAX_LOCAL_REPLICAS = 8


def parse_scale(items: str | list[str]) -> dict[str, int]:
    """`extraction=3,summary=2` (or a list of such items) as {kind: replicas};
    a later item of a kind wins. ValueError quotes the item that is wrong."""
    if isinstance(items, str):
        items = [items]
    scale: dict[str, int] = {}
    for part in (p.strip() for item in items for p in item.split(",")):
        if not part:
            continue
        kind, equals, count = (s.strip() for s in part.partition("="))
        if not equals:
            raise ValueError(f"{part!r}: expected KIND=REPLICAS, e.g. extraction=3")
        if kind not in WORKER_KINDS:
            raise ValueError(
                f"{part!r}: unknown worker kind {kind!r}; known: {', '.join(WORKER_KINDS)}"
            )
        if not count.isdigit():
            raise ValueError(f"{part!r}: replicas must be a whole number, not {count!r}")
        replicas = int(count)
        if not 1 <= replicas <= MAX_LOCAL_REPLICAS:
            raise ValueError(
                f"{part!r}: replicas must be from 1 to {MAX_LOCAL_REPLICAS}, not {replicas}"
            )
        scale[kind] = replicas
    return scale
