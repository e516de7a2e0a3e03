"""SQL migrations from `schemas/migrations/`, applied in order, once, under an advisory lock.

Files are named `NNNN_name.sql`. The only template in them is
`{{embedding_dim}}`, replaced by the configured dimension (an integer from the
settings, never user input). What was applied is recorded with a checksum of
its statements (the file without its `--` comment lines, so that a comment may
be reworded); an applied file whose statements have since changed is an error,
not a silent skip.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from shared.events.schemas import schemas_dir

_LOCK_KEY = 0x616D5F6D69677261  # "am_migra": serialises concurrent `migrate` runs
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# A checksum recorded as the SHA-256 of the whole file is accepted too (databases
# exist that recorded that one). The comments of these files differ from the
# ones such databases hashed, so their recorded whole-file hashes are listed.
_LEGACY_CHECKSUMS = {
    "0001_init.sql": "14bd25ba1c7afab49772ca2a6729a54c2f6c7a110fde185bc448dc2dce1a1548",
    "0002_revision_history.sql": (
        "605f3d78e257c7ad29cc3dd3300694615b139a2748a371bf3f159f6331916bcd"
    ),
}


class MigrationError(Exception):
    pass


class EmbeddingDimensionMismatch(MigrationError):
    pass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    def sql(self, embedding_dim: int) -> str:
        return self.path.read_text(encoding="utf-8").replace(
            "{{embedding_dim}}", str(int(embedding_dim))
        )

    @property
    def checksum(self) -> str:
        """The SHA-256 of the file's lines that are not `--` comments."""
        lines = self.path.read_text(encoding="utf-8").splitlines(keepends=True)
        statements = "".join(line for line in lines if not line.lstrip().startswith("--"))
        return hashlib.sha256(statements.encode("utf-8")).hexdigest()

    def matches(self, recorded: str) -> bool:
        """Is `recorded` a checksum of this file as it is now?"""
        whole = hashlib.sha256(self.path.read_bytes()).hexdigest()
        return recorded in (self.checksum, whole, _LEGACY_CHECKSUMS.get(self.path.name))


def migrations_dir() -> Path:
    return schemas_dir() / "migrations"


def discover(directory: Path | None = None) -> list[Migration]:
    found = []
    for path in sorted((directory or migrations_dir()).glob("*.sql")):
        match = _FILE.match(path.name)
        if not match:
            raise MigrationError(f"migration file name {path.name!r} is not NNNN_name.sql")
        found.append(Migration(int(match.group(1)), match.group(2), path))
    versions = [m.version for m in found]
    if len(versions) != len(set(versions)):
        raise MigrationError("two migration files share a version number")
    return found


def migrate(
    database_url: str,
    embedding_dim: int,
    directory: Path | None = None,
    login: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[str]:
    """Apply pending migrations; return the names applied (empty if up to date).
    `login`: extra connection parameters (the IAM token, shared/db/iam.py);
    `progress`: told what it waits for and each migration as it starts (one can
    rewrite a large table for minutes)."""
    say = progress or (lambda _line: None)
    applied_now: list[str] = []
    with psycopg.connect(database_url, autocommit=True, **(login or {})) as conn:
        locked = conn.execute("SELECT pg_try_advisory_lock(%s)", (_LOCK_KEY,)).fetchone()
        if not (locked and locked[0]):
            say("waiting for another migration of this database to finish ...")
            conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            conn.execute(
                """
                CREATE TABLE IF NOT EXISTS schema_migrations (
                    version    integer PRIMARY KEY,
                    name       text NOT NULL,
                    checksum   text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """
            )
            done = {
                row[0]: (row[1], row[2])
                for row in conn.execute("SELECT version, name, checksum FROM schema_migrations")
            }
            if database_embedding_dimension(conn) is not None:
                check_embedding_dimension(conn, embedding_dim)
            for migration in discover(directory):
                if migration.version in done:
                    if not migration.matches(done[migration.version][1]):
                        raise MigrationError(
                            f"migration {migration.path.name} changed after it was applied"
                        )
                    continue
                say(f"applying {migration.path.name} ...")
                with conn.transaction():
                    conn.execute(migration.sql(embedding_dim))
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name, checksum) "
                        "VALUES (%s, %s, %s)",
                        (migration.version, migration.name, migration.checksum),
                    )
                applied_now.append(migration.path.name)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    return applied_now


def database_embedding_dimension(conn: psycopg.Connection) -> int | None:
    """The dimension of `memories.embedding`, or None before the first migration."""
    row = conn.execute(
        """
        SELECT a.atttypmod FROM pg_attribute a
        WHERE a.attrelid = to_regclass('memories') AND a.attname = 'embedding'
        """
    ).fetchone()
    return int(row[0]) if row else None


def check_embedding_dimension(conn: psycopg.Connection, embedding_dim: int) -> None:
    """Fail with both numbers named if the database and the configuration disagree."""
    have = database_embedding_dimension(conn)
    if have is None:
        raise MigrationError("the database has no agent-memory tables; run `agent-memory migrate`")
    if have != embedding_dim:
        raise EmbeddingDimensionMismatch(
            f"embedding dimension mismatch: the database stores vectors of {have} dimensions "
            f"(memories.embedding) but AM_EMBEDDING_DIM is {embedding_dim}; set "
            f"AM_EMBEDDING_DIM={have} or use a new database"
        )


def ensure_database(conn: psycopg.Connection, name: str) -> bool:
    """Create the database `name` unless the server has it; True if it was created.
    `conn`: an autocommit connection to another database of the server (CREATE
    DATABASE cannot run in a transaction)."""
    if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
        return False
    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return True
