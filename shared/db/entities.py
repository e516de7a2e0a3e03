"""The entities repository: the entities a memory or an archived turn mentions,
resolved against the user's known ones (`shared.entities.resolution`) and linked,
and the fact a memory states (`shared.db.entity_facts`).

Called by the memories and episodes repositories in the transaction of the
write, which holds the user's lock: two writes of a user never resolve the same
new name at once, so no name becomes two entities. Nothing here calls a network
(the names are read by rules and compared by the `hash` embedding, in process).
An entity is its app's, user's and project's ('' for the user's global ones):
a project memory's or turn's entities are the project's, the others global.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import psycopg

from shared.db import entity_facts
from shared.db.run import fetch
from shared.entities.facts import stated
from shared.entities.names import KINDS, Mention, mentions, normalise
from shared.entities.resolution import Known, resolve


@dataclass(frozen=True)
class Owner:
    """Whose entities: the partition resolution looks in."""

    app: str
    user_id: str
    project_id: str


class Entities:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def known(self, owner: Owner) -> list[Known]:
        rows = fetch(
            self.conn,
            "SELECT e.id::text AS id, e.name, e.kind, e.last_seen, "
            "array_agg(a.normalised ORDER BY a.normalised) AS aliases "
            "FROM entities e JOIN entity_aliases a ON a.entity_id = e.id "
            "WHERE e.app = %s AND e.user_id = %s AND e.project_id = %s "
            "AND e.merged_into IS NULL GROUP BY e.id",
            (owner.app, owner.user_id, owner.project_id),
        )
        return [
            Known(r["id"], r["name"], r["kind"], tuple(r["aliases"]), r["last_seen"]) for r in rows
        ]

    def resolve_all(
        self, owner: Owner, found: Iterable[Mention], seen_at: datetime
    ) -> dict[str, str]:
        """Each mention's entity (found or made): normalised name → entity id."""
        found = list(found)
        if not found:
            return {}  # chatter names nothing: no read of the partition's entities
        known = self.known(owner)
        named: dict[str, str] = {}
        for mention in found:
            key = normalise(mention.name)
            if not key or key in named:
                continue
            kind = mention.kind if mention.kind in KINDS else "other"
            resolved = resolve(mention.name, kind, known)
            if resolved.entity is None and not mention.sure:
                continue
            if resolved.entity is None:
                entity_id = self._create(owner, mention.name, kind, key, seen_at)
                known.append(Known(entity_id, mention.name, kind, (key,), seen_at))
            else:
                entity_id = resolved.entity.id
                self._seen(owner, resolved.entity, mention, kind, key, resolved.how, seen_at)
                known = [
                    k
                    if k.id != entity_id
                    else Known(k.id, k.name, k.kind, (*k.aliases, key), seen_at)
                    for k in known
                ]
            named[key] = entity_id
        return named

    def _create(self, owner: Owner, name: str, kind: str, key: str, seen_at: datetime) -> str:
        row = self.conn.execute(
            "INSERT INTO entities (app, user_id, project_id, name, kind, first_seen, last_seen) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id::text",
            (owner.app, owner.user_id, owner.project_id, name, kind, seen_at, seen_at),
        ).fetchone()
        assert row is not None
        self._alias(row[0], owner, name, key, "name")
        return str(row[0])

    def _alias(self, entity_id: str, owner: Owner, alias: str, key: str, how: str) -> None:
        self.conn.execute(
            "INSERT INTO entity_aliases (entity_id, app, user_id, alias, normalised, how) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (entity_id, owner.app, owner.user_id, alias, key, how),
        )

    def _seen(
        self,
        owner: Owner,
        entity: Known,
        mention: Mention,
        kind: str,
        key: str,
        how: str,
        at: datetime,
    ) -> None:
        """A mention resolved to `entity`: its name becomes an alias, a fuller name its
        name, a known kind its kind (from `other`), and it was seen at `at`."""
        self._alias(entity.id, owner, mention.name, key, how)
        fuller = how == "full name"
        self.conn.execute(
            "UPDATE entities SET last_seen = greatest(last_seen, %s), "
            "first_seen = least(first_seen, %s), "
            "name = CASE WHEN %s THEN %s ELSE name END, "
            "kind = CASE WHEN kind = 'other' THEN %s ELSE kind END WHERE id = %s",
            (at, at, fuller, mention.name, kind, entity.id),
        )

    def link_memory(
        self,
        owner: Owner,
        memory_id: str,
        text: str,
        observed_at: datetime,
        event_id: str | None,
        named_by_model: Iterable[Mention] = (),
        late: bool = False,
    ) -> dict[str, str]:
        """The memory's mentions (its text's names and the model's) and the fact it
        states, as of `observed_at`; its facts it no longer states end then. A `late`
        observation (older than the memory's, kept in its history only) adds its
        fact to the past and ends nothing the memory states now."""
        found = [*mentions(text), *named_by_model]
        named = self.resolve_all(owner, found, observed_at)
        self._mention(named, owner, "memory_id", memory_id, found, observed_at)
        fact = stated(text, named)
        if not late:
            entity_facts.close_of_memory(self.conn, memory_id, observed_at, keep=fact)
        if fact is not None:
            entity_facts.record(
                self.conn, owner.app, owner.user_id, fact, observed_at, memory_id, event_id
            )
        return named

    def link_episode(self, owner: Owner, episode_id: str, text: str, at: datetime) -> None:
        """The archived turn's mentions (names of its user's and assistant's text)."""
        found = mentions(text)
        named = self.resolve_all(owner, found, at)
        self._mention(named, owner, "episode_id", episode_id, found, at)

    def _mention(
        self,
        named: dict[str, str],
        owner: Owner,
        column: str,
        row_id: str,
        found: list[Mention],
        at: datetime,
    ) -> None:
        if not named:
            return
        surfaces = {normalise(m.name): m.name for m in reversed(found)}
        with self.conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO entity_mentions (entity_id, app, user_id, {column}, surface, "
                "observed_at) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [
                    (entity_id, owner.app, owner.user_id, row_id, surfaces[key], at)
                    for key, entity_id in named.items()
                ],
            )
