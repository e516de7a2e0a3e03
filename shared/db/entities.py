"""The entities repository: the entities a memory or an archived turn mentions,
resolved against the user's known ones (`shared.entities.resolution`) and linked,
and the fact a memory states (`shared.db.entity_facts`).

Called by the memories and episodes repositories in the transaction of the
write, which holds the user's lock: two writes of a user never resolve the same
new name at once, so no name becomes two entities. Nothing here calls a network
(the names are read by rules and compared by the `hash` embedding, in process;
a model's judgement of a name, `shared.entities.judging`, was asked before the
write began and comes with the memory).
An entity is its app's, user's and project's ('' for the user's global ones):
a project memory's or turn's entities are the project's, the others global.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import psycopg
import structlog

from shared.db import entity_facts, entity_merges
from shared.db.run import Statement, Steps, run
from shared.entities.facts import stated
from shared.entities.judging import Judgement, resolve_judged
from shared.entities.names import KINDS, Mention, mentions, normalise
from shared.entities.resolution import UNSURE, Known, Resolved, resolve

log = structlog.get_logger("agent_memory.entities")


@dataclass(frozen=True)
class Owner:
    """Whose entities: the partition resolution looks in."""

    app: str
    user_id: str
    project_id: str


def known_of(app: str, user_id: str, projects: Sequence[str]) -> Steps[dict[str, list[Known]]]:
    """The entities of the user's partitions `projects` ('' the user's own), not
    merged away, with their aliases: project → its entities."""
    rows = yield Statement(
        "SELECT e.id::text AS id, e.project_id, e.name, e.kind, e.first_seen, e.last_seen, "
        "array_agg(a.normalised ORDER BY a.normalised) AS aliases, "
        "array_agg(a.normalised ORDER BY a.normalised) FILTER (WHERE a.how = ANY(%s)) AS weak "
        "FROM entities e JOIN entity_aliases a ON a.entity_id = e.id "
        "WHERE e.app = %s AND e.user_id = %s AND e.project_id = ANY(%s) "
        "AND e.merged_into IS NULL GROUP BY e.id",
        (list(UNSURE), app, user_id, list(projects)),
    )
    found: dict[str, list[Known]] = {project: [] for project in projects}
    for r in rows:
        found[r["project_id"]].append(
            Known(
                r["id"],
                r["name"],
                r["kind"],
                tuple(r["aliases"]),
                r["last_seen"],
                r["first_seen"],
                tuple(r["weak"] or ()),
            )
        )
    return found


class Entities:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def known(self, owner: Owner) -> list[Known]:
        return run(self.conn, known_of(owner.app, owner.user_id, (owner.project_id,)))[
            owner.project_id
        ]

    def resolve_all(
        self,
        owner: Owner,
        found: Iterable[Mention],
        seen_at: datetime,
        judged: Iterable[Judgement] = (),
    ) -> dict[str, str]:
        """Each mention's entity (found or made): normalised name → entity id. A
        model's judgement of a name (`judged`) comes before the rules."""
        found = list(found)
        if not found:
            return {}  # chatter names nothing: no read of the partition's entities
        judgements = {normalise(j.name): j for j in judged}
        known = self.known(owner)
        named: dict[str, str] = {}
        for mention in found:
            key = normalise(mention.name)
            if not key or key in named:
                continue
            kind = _kind(mention)
            judgement = judgements.get(key)
            resolved = resolve_judged(mention.name, kind, known, judgement)
            if judgement is not None and judgement.same_as and resolved.how != "model":
                log.info(
                    "entity judgement ignored",
                    entity_id=judgement.same_as,
                    reason="no entity of the memory's user and project (merged, or another's)",
                )
            if resolved.entity is None and not mention.sure:
                continue
            if resolved.entity is None:
                entity_id = self._create(owner, mention.name, kind, key, seen_at)
                known.append(Known(entity_id, mention.name, kind, (key,), seen_at, seen_at))
                named[key] = entity_id
                continue
            entity_id = resolved.entity.id
            # Before the alias is taken: the entity the rules would have answered.
            own = self._own(mention, kind, resolved, known)
            self._seen(owner, resolved.entity, mention, kind, key, resolved.how, seen_at)
            if own is not None:
                entity_merges.merge(
                    self.conn, owner.app, owner.user_id, owner.project_id, own.id, entity_id
                )
            known = [
                replace(
                    k, aliases=(*k.aliases, key, *(own.aliases if own else ())), last_seen=seen_at
                )
                if k.id == entity_id
                else k
                for k in known
                if own is None or k.id != own.id
            ]
            named[key] = entity_id
        return named

    def _own(
        self, mention: Mention, kind: str, resolved: Resolved, known: list[Known]
    ) -> Known | None:
        """When the model said `mention` is another entity than the one of that very
        name the rules would take, and no memory mentions that one (a turn archived
        before the model was asked made it): that one, to merge into the model's
        (recorded, so `:unmerge` undoes it). Else None."""
        if resolved.how != "model" or resolved.entity is None:
            return None
        own = resolve(mention.name, kind, known).entity
        if own is None or own.id == resolved.entity.id:
            return None
        if normalise(own.name) != normalise(mention.name):
            return None  # a name the rules took for it ("Dana" for "Dana Smith"): two things
        in_memories = self.conn.execute(
            "SELECT 1 FROM entity_mentions WHERE entity_id = %s AND memory_id IS NOT NULL LIMIT 1",
            (own.id,),
        ).fetchone()
        return own if in_memories is None else None

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
        judged: Iterable[Judgement] = (),
    ) -> dict[str, str]:
        """The memory's mentions (its text's names and the model's, resolved with the
        model's `judged` names first) and the fact it states, as of `observed_at`;
        its facts it no longer states end then. A `late` observation (older than the
        memory's, kept in its history only) adds its fact to the past and ends
        nothing the memory states now."""
        found = [*mentions(text), *named_by_model]
        named = self.resolve_all(owner, found, observed_at, judged)
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
        # Each name as first said, and the kind said with it.
        said = {normalise(m.name): m for m in reversed(found)}
        with self.conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO entity_mentions (entity_id, app, user_id, {column}, surface, "
                "observed_at, kind) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [
                    (
                        entity_id,
                        owner.app,
                        owner.user_id,
                        row_id,
                        said[key].name,
                        at,
                        _kind(said[key]),
                    )
                    for key, entity_id in named.items()
                ],
            )


def _kind(mention: Mention) -> str:
    """The kind a mention says, or `other` for one no entity has (a model's own word)."""
    return mention.kind if mention.kind in KINDS else "other"
