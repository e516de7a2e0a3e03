"""`agent-memory archive backfill-keys`: key the episodes archived before the
archive had search keys (migration 0008), session by session.

Each session's keys are computed and embedded from its rows with no transaction
open, then stored in a transaction of its own under its user's lock (the lock
the extraction worker archives under) if the rows are still those; otherwise
computed again. So the workers keep running and a session is either keyed whole
or not at all; a second run, or a run after Ctrl-C, takes up the sessions still
without keys. Progress goes to stderr: a
bar on a terminal, a line per batch otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from pgvector.psycopg import register_vector
from tqdm import tqdm

from shared.config import Settings
from shared.db.episodes import Episodes, KeyPlan
from shared.db.migrate import MigrationError, check_embedding_dimension
from shared.db.planned_write import StalePlan, user_transaction_on, write_planned
from shared.db.pool import connect_kwargs

Embed = Callable[[list[str]], Sequence[Any]]

NOT_MIGRATED = (
    "the database has no episode keys yet: run `agent-memory migrate` first "
    "(migration 0008_episode_keys.sql)"
)


def _fail(message: str, code: int = 1) -> int:
    print(f"agent-memory archive: {message}", file=sys.stderr)
    return code


def run_archive_command(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0 when every session is keyed, 1 when Postgres or the embeddings failed
    (what was keyed stays keyed), 130 on Ctrl-C."""
    if not settings.database_url:
        return _fail("AM_DATABASE_URL is not set")
    from shared.embeddings import EmbeddingError, make_embedder

    backfill = Backfill(settings, make_embedder(settings).embed, args.batch)
    try:
        with psycopg.connect(
            settings.database_url, autocommit=True, **connect_kwargs(settings)
        ) as conn:
            return backfill.run(conn)
    except MigrationError as exc:
        return _fail(str(exc))
    except psycopg.Error as exc:
        return _fail(f"Postgres: {' '.join(str(exc).split())}; {backfill.so_far()}")
    except EmbeddingError as exc:
        return _fail(f"embeddings: {exc}; {backfill.so_far()}")
    except KeyboardInterrupt:
        return _fail(f"interrupted; {backfill.so_far()}", 130)


class Backfill:
    def __init__(self, settings: Settings, embed: Embed, batch: int) -> None:
        self.settings = settings
        self.embed = embed
        self.batch = batch
        self.done = 0

    def so_far(self) -> str:
        return f"{_episodes(self.done)} keyed; run it again to go on"

    def run(self, conn: psycopg.Connection) -> int:
        episodes = Episodes(conn)
        if not episodes.keyed_schema():
            return _fail(NOT_MIGRATED)
        check_embedding_dimension(conn, self.settings.embedding_dim)
        register_vector(conn)  # the keys' embeddings are sent as pgvector's type
        total = episodes.unkeyed()
        started = time.monotonic()
        terminal = sys.stderr.isatty()
        with tqdm(total=total, unit=" episodes", file=sys.stderr, disable=not terminal) as bar:
            while sessions := episodes.unkeyed_sessions(self.batch):
                batch_done = 0
                for app, user_id, session_id in sessions:
                    keyed = self._key(episodes, app, user_id, session_id)
                    batch_done += keyed
                    bar.update(keyed)
                self.done += batch_done
                if batch_done == 0:
                    break  # these sessions kept changing while being keyed
                if not terminal:
                    line = f"keyed {self.done} of {_episodes(total)}"
                    print(line, file=sys.stderr, flush=True)
        took = time.monotonic() - started
        left = episodes.unkeyed()
        if left:
            print(
                f"keyed {_episodes(self.done)} in {took:.1f} s; {_episodes(left)} of sessions "
                "that kept changing are left: run it again"
            )
            return 1
        print(f"keyed {_episodes(self.done)} in {took:.1f} s; none is left without a key")
        return 0

    def _key(self, episodes: Episodes, app: str, user_id: str, session_id: str) -> int:
        """One session, whole or not at all, between the worker's turns."""
        neighbours, dated = self.settings.episode_key_neighbours, self.settings.episode_key_dated

        def plan() -> tuple[KeyPlan, Sequence[Any]]:
            keys = episodes.plan_session(app, user_id, session_id, neighbours, dated)
            return keys, self.embed(keys.texts) if keys.keys else []

        def write(_tx: None, planned: tuple[KeyPlan, Sequence[Any]]) -> int:
            keyed = episodes.key_session(app, user_id, session_id, *planned)
            if keyed is None:
                raise StalePlan("its turns changed")
            return keyed

        try:
            return write_planned(
                lambda: user_transaction_on(episodes.conn, app, user_id),
                plan,
                write,
                attempts=self.settings.write_attempts,
                what=f"session {session_id}",
            )
        except StalePlan:
            return 0  # still changing: left for the next run


def _episodes(n: int) -> str:
    return f"{n} episode" if n == 1 else f"{n} episodes"
