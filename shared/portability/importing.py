"""Importing an export (`records`) into one user of one app, the same for the CLI
and the API.

- **Idempotent.** Rows keep their ids, and a row that is there already is left
  as it is (a memory keeps its revisions): importing a file twice changes nothing
  the second time. Imported into another app or user than the export's, each id
  is derived from the target and the original id (`copy_id`), so the copy never
  collides with the original and a second import finds its own rows again.
- **Record by record.** Lines are read and checked with no transaction open; then
  up to `BATCH_RECORDS` records are written in one transaction under the user's
  lock (the lock every writer of the user takes), each in a savepoint of its own:
  a record Postgres refuses leaves nothing of itself, and the others stay.
- **Bad lines** (not JSON, an unknown type or kind, a missing or invalid field,
  an embedding of another dimension, a row Postgres refuses) are reported with
  their number and reason through `on_bad`, and the good lines are imported. A bad
  header stops the import before anything is written.
- **A deleted user stays deleted.** A user with a GDPR tombstone
  (`deleted_users`) is refused (`UserDeleted`) before anything is written, and a
  deletion that commits during the import stops it at the next batch. Bringing
  erased data back is an operator's deliberate act: remove the tombstone first.
- No change event is published for imported rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import BinaryIO
from uuid import UUID

import psycopg

from shared.db.entity_import import Unlinked, write_entity, write_fact, write_merge
from shared.db.planned_write import user_transaction_on
from shared.db.tombstones import Tombstones
from shared.db.user_import import Written, write_episode, write_memory, write_profile_field
from shared.portability.entity_records import EntityRecord, FactRecord
from shared.portability.profile_records import ProfileRecord
from shared.portability.records import (
    MAX_LINE_BYTES,
    BadLine,
    Data,
    EndRecord,
    Header,
    MemoryRecord,
    Record,
    parse_header,
    parse_record,
)

# Records per transaction: each holds the user's lock for a few milliseconds.
BATCH_RECORDS = 100
# What Postgres refuses in a record's own values (SQLSTATE classes): a data
# exception, an integrity constraint, a program limit (an index entry or a
# tsvector over its size). Anything else is the database's or the code's failure.
_REFUSALS = ("22", "23", "54")

Line = tuple[int, bytes | None]  # its number, and its bytes (None: over MAX_LINE_BYTES)
OnBad = Callable[[BadLine], None]


class UserDeleted(Exception):
    """The target user has a GDPR tombstone: nothing (more) is imported."""

    def __init__(self, app: str, user_id: str, deleted_at: datetime) -> None:
        super().__init__(
            f"user {user_id!r} of app {app!r} was deleted (GDPR) at {deleted_at.isoformat()}: "
            "importing would bring erased data back; nothing more was imported"
        )
        self.deleted_at = deleted_at


@dataclass
class ImportReport:
    memories: int = 0
    episodes: int = 0
    profiles: int = 0  # profile fields
    entities: int = 0
    facts: int = 0
    merges: int = 0
    skipped: int = 0  # already there
    bad_lines: int = 0
    complete: bool = False  # the export's end line was read (and nothing after it)
    app: str = ""
    user_id: str = ""

    def summary(self) -> str:
        return (
            f"imported {self.memories} memories, {self.episodes} episodes, "
            f"{self.profiles} profile fields, {self.entities} entities, {self.facts} facts, "
            f"{self.merges} merges; "
            f"skipped {self.skipped} already there; {self.bad_lines} bad lines"
        )


def numbered_lines(stream: BinaryIO) -> Iterator[Line]:
    """The stream's lines with their numbers (from 1), without the line ending; a
    line over `MAX_LINE_BYTES` is skipped unread and given as None."""
    number = 0
    while line := stream.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while (rest := stream.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                pass
            yield number, None
            continue
        yield number, line.rstrip(b"\r\n")


def import_lines(
    conn: psycopg.Connection,
    lines: Iterable[Line],
    embedding_dim: int,
    on_bad: OnBad,
    app: str | None = None,
    user_id: str | None = None,
) -> ImportReport:
    """Import the export's `lines` into `user_id` of `app` (None: the header's).
    `conn` is idle (no transaction open); raises UserDeleted for a deleted user."""
    report = ImportReport()
    lines = iter(lines)
    header = _header(lines, embedding_dim, on_bad, report)
    if header is None:
        return report
    report.app, report.user_id = app or header.app, user_id or header.user_id
    importer = _Importer(conn, report, header, on_bad)
    with conn.transaction():
        importer.check_tombstone()
    batch: list[tuple[int, Data]] = []
    for number, raw in lines:
        if raw is not None and not raw.strip():
            continue
        record = _parsed(number, raw, embedding_dim)
        report.complete = isinstance(record, EndRecord)
        if isinstance(record, BadLine):
            importer.bad(record)
        elif not isinstance(record, EndRecord):
            batch.append((number, record))
            if len(batch) >= BATCH_RECORDS:
                importer.write(batch)
                batch = []
    if batch:
        importer.write(batch)
    return report


def copy_id(original: UUID, app: str, user_id: str) -> UUID:
    """A copy's id for the row `original` under `user_id` of `app`: the original's
    first 8 bytes, then 8 of a hash of the target and the original. Searches break
    ties between rows by id, so with the original's order the copy ranks exactly as
    the original does; the hash keeps it apart from the original and other copies."""
    digest = bytearray(hashlib.sha256(f"{app}\x1f{user_id}\x1f{original}".encode()).digest())
    digest[0] = (digest[0] & 0x3F) | 0x80  # the RFC 4122 variant, as in the original
    return UUID(bytes=original.bytes[:8] + bytes(digest[:8]))


def _parsed(number: int, raw: bytes | None, dim: int) -> Record | BadLine:
    if raw is None:
        return BadLine(number, f"over {MAX_LINE_BYTES} bytes; not read")
    return parse_record(number, raw, dim)


def _header(lines: Iterator[Line], dim: int, on_bad: OnBad, report: ImportReport) -> Header | None:
    """The first line that is not blank, as the header; None (reported) if it is not one."""
    for number, raw in lines:
        if raw is not None and not raw.strip():
            continue
        header = parse_header(number, raw, dim) if raw is not None else None
        if isinstance(header, Header):
            return header
        report.bad_lines += 1
        on_bad(header or BadLine(number, f"over {MAX_LINE_BYTES} bytes; not read"))
        return None
    report.bad_lines += 1
    on_bad(BadLine(1, "missing: an export begins with its header line"))
    return None


class _Importer:
    def __init__(
        self, conn: psycopg.Connection, report: ImportReport, header: Header, on_bad: OnBad
    ) -> None:
        self.conn = conn
        self.report = report
        self.on_bad = on_bad
        self.app, self.user_id = report.app, report.user_id
        # The export's own user keeps its ids; a copy's are derived.
        self.keep_ids = (self.app, self.user_id) == (header.app, header.user_id)
        # An older export has no entity lines: the writes derive them.
        self.derive = not header.entities

    def bad(self, line: BadLine) -> None:
        self.report.bad_lines += 1
        self.on_bad(line)

    def check_tombstone(self) -> None:
        deleted_at = Tombstones(self.conn).deleted_at(self.app, self.user_id)
        if deleted_at is not None:
            raise UserDeleted(self.app, self.user_id, deleted_at)

    def target_id(self, original: UUID) -> UUID:
        return original if self.keep_ids else copy_id(original, self.app, self.user_id)

    def write(self, batch: list[tuple[int, Data]]) -> None:
        """One transaction under the user's lock; each record in a savepoint."""
        with user_transaction_on(self.conn, self.app, self.user_id):
            self.check_tombstone()  # a deletion may have committed since the last batch
            for number, record in batch:
                try:
                    with self.conn.transaction():
                        written = self._write(record)
                except psycopg.DatabaseError as exc:
                    if (exc.sqlstate or "")[:2] not in _REFUSALS:
                        raise
                    self.bad(BadLine(number, _refused(exc, record)))
                    continue
                except Unlinked as exc:
                    self.bad(BadLine(number, str(exc)))
                    continue
                self._count(number, record, written)

    def _write(self, record: Data) -> Written:
        conn, app, user_id, target = self.conn, self.app, self.user_id, self.target_id
        if isinstance(record, ProfileRecord):
            return write_profile_field(conn, app, user_id, record)
        if isinstance(record, MemoryRecord):
            return write_memory(conn, app, user_id, target(record.id), record, self.derive)
        if isinstance(record, EntityRecord):
            return write_entity(conn, app, user_id, record, target)
        if isinstance(record, FactRecord):
            return write_fact(conn, app, user_id, record, target)
        if record.type == "merge":
            return write_merge(conn, app, user_id, record, target)
        return write_episode(conn, app, user_id, target(record.id), record, self.derive)

    def _count(self, number: int, record: Data, written: Written) -> None:
        kind = record.type
        if written is Written.THERE:
            self.report.skipped += 1
        elif written is Written.OTHERS and not isinstance(record, ProfileRecord):
            self.bad(BadLine(number, f"id {record.id} is another user's {kind}; not imported"))
        else:
            counted = {"memory": "memories", "entity": "entities"}.get(kind, f"{kind}s")
            setattr(self.report, counted, getattr(self.report, counted) + 1)


def _refused(exc: psycopg.Error, record: Data) -> str:
    """Why Postgres refused a record, in a line."""
    if getattr(exc.diag, "constraint_name", None) == "memories_live_entity":
        assert isinstance(record, MemoryRecord)
        return (
            f"the user has a live memory of entity {record.entity_name!r} in this scope "
            "under another id; not imported"
        )
    first = (exc.diag.message_primary or str(exc)).splitlines()[0]
    return f"refused by the database: {first}"
