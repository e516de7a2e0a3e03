"""The episodes repository: the archive of recorded turns, their search keys, and
what compaction reads from it and removes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from shared.db.entities import Entities, Owner
from shared.db.pool import as_vector
from shared.db.run import fetch
from shared.memory.episode_keys import neighbourhoods

# An episode's full-text vector: its own words weigh more than its context's.
EPISODE_TSV = (
    "setweight(to_tsvector('english', {text}), 'A') "
    "|| setweight(to_tsvector('english', coalesce({context}, '')), 'B')"
)


@dataclass(frozen=True)
class Keyed:
    """An archived turn as its key is computed: its id, text and current context."""

    id: str | None  # None: the turn being archived
    text: str
    created_at: datetime
    context: str | None


@dataclass(frozen=True)
class Episode:
    app: str
    user_id: str
    project_id: str
    session_id: str
    turn_id: str
    event_id: str
    user_text: str
    assistant_text: str
    tool_events: list[dict[str, str]]
    created_at: datetime
    agent_id: str = ""  # the agent that said it ('' none)

    @property
    def text(self) -> str:
        """What the archive searches: the dialogue, not the tool traffic."""
        return f"User: {self.user_text}\nAssistant: {self.assistant_text}"


@dataclass(frozen=True)
class OldEpisode:
    """An archived turn as compaction folds it."""

    id: str
    project_id: str
    session_id: str
    turn_id: str
    user_text: str
    assistant_text: str
    created_at: datetime
    agent_id: str = ""  # its agent's turns fold into that agent's summary


@dataclass(frozen=True)
class KeyPlan:
    """The search keys a session's turns need, computed from a snapshot of its rows
    read outside any transaction: `rows` the snapshot (checked again under the
    user's lock before anything is written), `keys` episode id (None: the turn
    being archived) -> (context, the whole key's text) of each key that changed."""

    rows: tuple[Keyed, ...]
    keys: dict[str | None, tuple[str, str]]

    @property
    def texts(self) -> list[str]:
        """What to embed, in the order `embedded` takes the vectors back."""
        return [text for _context, text in self.keys.values()]

    def embedded(self, vectors: Sequence[Any]) -> dict[str | None, tuple[str, Any]]:
        """Episode id -> (context, the key's embedding as pgvector's type)."""
        return {
            id_: (context, as_vector(vector))
            for (id_, (context, _text)), vector in zip(self.keys.items(), vectors, strict=True)
        }


def _changed_keys(
    session: list[Keyed], among: range, neighbours: int, dated: bool
) -> dict[str | None, tuple[str, str]]:
    """The keys of the turns `among` a session's (in order) whose context is not
    the stored one (a turn not yet archived has none): episode id (None for that
    turn) -> (context, the whole key's text)."""
    keyed = neighbourhoods(
        [k.text for k in session], [k.created_at for k in session], neighbours, dated
    )
    return {
        session[j].id: (keyed[j].context(), keyed[j].key())
        for j in among
        if session[j].context != keyed[j].context() or session[j].id is None
    }


class Episodes:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def archived(self, episode: Episode) -> bool:
        """Is the turn in the archive already?"""
        row = self.conn.execute(
            "SELECT 1 FROM episodes WHERE app = %s AND user_id = %s AND session_id = %s "
            "AND turn_id = %s",
            (episode.app, episode.user_id, episode.session_id, episode.turn_id),
        ).fetchone()
        return row is not None

    def plan_archive(self, episode: Episode, neighbours: int, dated: bool) -> KeyPlan:
        """The keys archiving `episode` writes: its own, and those of its session's
        turns within `neighbours` of it, whose neighbourhoods now hold it (a turn that arrives
        late goes between its neighbours). Every key is a function of the session's
        rows, so a redelivery or replay computes the same keys; only the keys that
        changed are embedded again."""
        before = self._neighbours(episode, "<", "DESC", 2 * neighbours)[::-1]
        after = self._neighbours(episode, ">", "ASC", 2 * neighbours)
        new = Keyed(None, episode.text, episode.created_at, None)
        session = [*before, new, *after]
        at = len(before)
        around = range(max(0, at - neighbours), min(len(session), at + neighbours + 1))
        return KeyPlan((*before, *after), _changed_keys(session, around, neighbours, dated))

    def archive(
        self, episode: Episode, plan: KeyPlan, vectors: Sequence[Any], neighbours: int
    ) -> bool | None:
        """Archive the turn with the keys of `plan` (made with this `neighbours`), embedded
        as `vectors`; False if it is archived already, None (nothing written) if its
        session's turns around it are no longer those `plan` was computed from.
        Under the user's lock (the extraction transaction): two turns of a session
        never key each other from snapshots missing each other."""
        before = self._neighbours(episode, "<", "DESC", 2 * neighbours)[::-1]
        after = self._neighbours(episode, ">", "ASC", 2 * neighbours)
        if (*before, *after) != plan.rows:
            return None
        keys = plan.embedded(vectors)
        context, embedding = keys.pop(None)
        tsv = EPISODE_TSV.format(text="%(text)s", context="%(context)s")
        row = self.conn.execute(
            f"""
            INSERT INTO episodes (app, user_id, project_id, session_id, turn_id, event_id,
                                  user_text, assistant_text, tool_events, text, context,
                                  tsv, embedding, created_at, agent_id)
            VALUES (%(app)s, %(user_id)s, %(project_id)s, %(session_id)s, %(turn_id)s,
                    %(event_id)s, %(user_text)s, %(assistant_text)s, %(tool_events)s,
                    %(text)s, %(context)s, {tsv}, %(embedding)s, %(created_at)s,
                    %(agent_id)s)
            ON CONFLICT (app, user_id, session_id, turn_id) DO NOTHING
            RETURNING id::text
            """,
            {
                "app": episode.app,
                "user_id": episode.user_id,
                "project_id": episode.project_id,
                "session_id": episode.session_id,
                "turn_id": episode.turn_id,
                "event_id": episode.event_id,
                "user_text": episode.user_text,
                "assistant_text": episode.assistant_text,
                "tool_events": Jsonb(episode.tool_events),
                "text": episode.text,
                "context": context,
                "embedding": embedding,
                "created_at": episode.created_at,
                "agent_id": episode.agent_id,
            },
        ).fetchone()
        if row is None:
            return False
        self._rekey(keys)
        owner = Owner(episode.app, episode.user_id, episode.project_id)
        said = f"{episode.user_text}\n{episode.assistant_text}"
        Entities(self.conn).link_episode(owner, row[0], said, episode.created_at)
        return True

    def archive_locally(
        self,
        episode: Episode,
        embed: Callable[[list[str]], Sequence[Any]],
        neighbours: int,
        dated: bool,
    ) -> bool:
        """`plan_archive` and `archive` in the caller's transaction, for an `embed` that
        computes locally (the `hash` provider, vectors at hand), never one that calls
        a network: the tests', the benchmarks' and the migrations' archiving."""
        plan = self.plan_archive(episode, neighbours, dated)
        written = self.archive(episode, plan, embed(plan.texts) if plan.keys else [], neighbours)
        if written is None:
            raise RuntimeError("the session changed inside one transaction")
        return written

    def _rekey(self, keys: dict[str | None, tuple[str, Any]]) -> None:
        """Store new keys: episode id -> (context, embedding of the whole key)."""
        if not keys:
            return
        tsv = EPISODE_TSV.format(text="text", context="%s")
        with self.conn.cursor() as cur:
            cur.executemany(
                f"UPDATE episodes SET context = %s, tsv = {tsv}, embedding = %s "
                "WHERE id = %s::uuid",
                [(context, context, embedding, id_) for id_, (context, embedding) in keys.items()],
            )

    def plan_session(
        self, app: str, user_id: str, session_id: str, neighbours: int, dated: bool
    ) -> KeyPlan:
        """The keys every turn of a session needs again, from its rows (the backfill)."""
        session = self._session_rows(app, user_id, session_id)
        return KeyPlan(
            tuple(session), _changed_keys(session, range(len(session)), neighbours, dated)
        )

    def key_session(
        self, app: str, user_id: str, session_id: str, plan: KeyPlan, vectors: Sequence[Any]
    ) -> int | None:
        """Store the keys of `plan` (under the user's lock); how many turns had no key
        before, or None (nothing written) if the session's rows changed since."""
        if tuple(self._session_rows(app, user_id, session_id)) != plan.rows:
            return None
        keys = plan.embedded(vectors)
        keys.pop(None, None)
        self._rekey(keys)
        return sum(1 for k in plan.rows if k.context is None)

    def _session_rows(self, app: str, user_id: str, session_id: str) -> list[Keyed]:
        rows = self.conn.execute(
            "SELECT id::text, text, created_at, context FROM episodes "
            "WHERE app = %s AND user_id = %s AND session_id = %s ORDER BY created_at, turn_id",
            (app, user_id, session_id),
        ).fetchall()
        return [Keyed(*row) for row in rows]

    def count_session(self, app: str, user_id: str, session_id: str) -> int:
        """How many turns of the session are archived."""
        row = self.conn.execute(
            "SELECT count(*) FROM episodes WHERE app = %s AND user_id = %s AND session_id = %s",
            (app, user_id, session_id),
        ).fetchone()
        return int(row[0]) if row else 0

    def unkeyed_sessions(self, limit: int) -> list[tuple[str, str, str]]:
        """Up to `limit` sessions (app, user, session) with turns archived without a key."""
        rows = self.conn.execute(
            "SELECT DISTINCT app, user_id, session_id FROM episodes WHERE context IS NULL "
            "ORDER BY app, user_id, session_id LIMIT %s",
            (limit,),
        ).fetchall()
        return [(app, user_id, session_id) for app, user_id, session_id in rows]

    def unkeyed(self) -> int:
        """How many archived turns have no key yet."""
        row = self.conn.execute("SELECT count(*) FROM episodes WHERE context IS NULL").fetchone()
        return int(row[0]) if row else 0

    def keyed_schema(self) -> bool:
        """Whether the database has the episodes' keys (migration 0008)."""
        row = self.conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = 'episodes' AND column_name = 'context'"
        ).fetchone()
        return row is not None

    def _neighbours(self, episode: Episode, side: str, order: str, limit: int) -> list[Keyed]:
        """Up to `limit` turns of the episode's session before (`<`) or after (`>`) it
        in the session's order (time, then turn id), nearest first."""
        if limit == 0:
            return []
        rows = self.conn.execute(
            "SELECT id::text, text, created_at, context FROM episodes "
            "WHERE app = %s AND user_id = %s AND session_id = %s "
            f"AND (created_at, turn_id) {side} (%s, %s) "
            f"ORDER BY created_at {order}, turn_id {order} LIMIT %s",
            (
                episode.app,
                episode.user_id,
                episode.session_id,
                episode.created_at,
                episode.turn_id,
                limit,
            ),
        ).fetchall()
        return [Keyed(*row) for row in rows]

    def users_with_old(self, app: str, cutoff: datetime, project_id: str = "") -> list[str]:
        """The users of `app` with episodes created before `cutoff` (of `project_id`
        only, when not ""), in order."""
        project = "AND project_id = %(project)s " if project_id else ""
        rows = self.conn.execute(
            "SELECT DISTINCT user_id FROM episodes WHERE app = %(app)s "
            f"AND created_at < %(cutoff)s {project}ORDER BY user_id",
            {"app": app, "cutoff": cutoff, "project": project_id},
        ).fetchall()
        return [row[0] for row in rows]

    def old(
        self, app: str, user_id: str, project_id: str, cutoff: datetime, limit: int
    ) -> list[OldEpisode]:
        """The user's episodes created before `cutoff` (of `project_id` only, when
        not ""), oldest first, at most `limit`."""
        project = "AND project_id = %(project)s " if project_id else ""
        rows = fetch(
            self.conn,
            "SELECT id::text AS id, project_id, session_id, turn_id, user_text, "
            "assistant_text, created_at, agent_id FROM episodes "
            "WHERE app = %(app)s AND user_id = %(user_id)s AND created_at < %(cutoff)s "
            f"{project}ORDER BY created_at, id LIMIT %(limit)s",
            {
                "app": app,
                "user_id": user_id,
                "project": project_id,
                "cutoff": cutoff,
                "limit": limit,
            },
        )
        return [OldEpisode(**row) for row in rows]

    def delete(self, app: str, user_id: str, ids: list[str]) -> int:
        """Remove these episodes of the user; how many were there."""
        return self.conn.execute(
            "DELETE FROM episodes WHERE app = %s AND user_id = %s AND id = ANY(%s::uuid[])",
            (app, user_id, ids),
        ).rowcount
