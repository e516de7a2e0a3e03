"""The compaction chain the compaction worker's faults meet: episodes 60 days old,
one compaction request per user, and the check that every old episode was folded
exactly once."""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime, timedelta

import psycopg

from bench.chaos_suite.budgets import SEND_BUDGET, wait_until
from bench.chaos_suite.burst import Burst, Turn
from bench.chaos_suite.observe import peek, settle
from bench.chaos_suite.report import Row
from bench.chaos_suite.scenario import Context
from bench.chaos_suite.stack import Stack
from shared.client.errors import MemoryClientError
from shared.events import derived_event_id, format_time

OLD_TURNS_PER_USER = 24  # compaction scenarios: episodes 60 days old per user
# Episodes per compaction request: a chain of 24 requests per user, so that the
# fault meets the chain under way (a fold takes tens of milliseconds).
COMPACTION_BATCH = 1
COMPACTION_RETENTION_DAYS = 30
COMPACTED_ENTITY = "compacted-episodes"


def marker(user: str, n: int) -> str:
    return f"mk{user.rsplit('-u', 1)[1]}x{n:02d}z"


def old_turns(app: str, users: list[str]) -> list[Turn]:
    """Turns created 60 days ago, each stating something the compaction keeps."""
    start = datetime.now(UTC) - timedelta(days=60)
    return [
        Turn(
            app,
            user,
            f"{user}-old",
            f"old-{n:02d}",
            f"For the archive we must keep marker {marker(user, n)} in the notes.",
            created_at=format_time(start + timedelta(minutes=n)),
        )
        for user in users
        for n in range(OLD_TURNS_PER_USER)
    ]


def prepare_old_episodes(ctx: Context, old: list[Turn], row: Row) -> bool:
    Burst(ctx.stack, old, rate=100).start().join(ctx.until(SEND_BUDGET))
    settled = settle(ctx.stack, ctx.app, old, ctx.until(60), targets=("archive",))
    if settled.at is None or not all(t.event_id for t in old):
        row.fail(f"the old episodes were not archived before the burst: {settled.why}")
        row.recovered = False
        return False
    return True


def request_compactions(stack: Stack, users: list[str], row: Row) -> dict[str, list[str]]:
    """One request per user; returns each user's chain of event ids (the request's,
    then each continuation's, derived as the worker derives them)."""
    chains = {}
    length = math.ceil(OLD_TURNS_PER_USER / COMPACTION_BATCH)
    with stack.client() as client:
        for user in users:
            try:
                accepted = client.request_compaction(
                    user, retention_days=COMPACTION_RETENTION_DAYS, batch_limit=COMPACTION_BATCH
                )
            except MemoryClientError as exc:
                row.fail(f"compaction request for {user} refused: {exc}")
                continue
            chain = [accepted.event_id]
            while len(chain) < length:
                chain.append(derived_event_id(chain[-1], "continue"))
            chains[user] = chain
    return chains


# Over the scenario's users: the memory revisions compaction wrote, and the
# episodes older than the retention (what compaction has still to fold).
REVISIONS_SQL = (
    "SELECT count(*) FROM memory_revisions r JOIN memories m ON m.id = r.memory_id "
    "WHERE m.app = %s AND m.user_id = ANY(%s) AND m.entity_name = %s"
)
OLD_EPISODES_SQL = (
    "SELECT count(*) FROM episodes WHERE app = %s AND user_id = ANY(%s) "
    "AND created_at < now() - make_interval(days => %s)"
)


def compaction_revisions(conn: psycopg.Connection, app: str, users: list[str]) -> int:
    return conn.execute(REVISIONS_SQL, (app, users, COMPACTED_ENTITY)).fetchone()[0]


def wait_first_fold(stack: Stack, app: str, users: list[str], deadline: float) -> int | None:
    """Folds applied once the first is (one connection, polled often: a fold takes
    tens of milliseconds); None if none was by `deadline`."""
    try:
        with stack.postgres() as conn:
            if wait_until(lambda: compaction_revisions(conn, app, users) > 0, deadline, 0.005):
                return compaction_revisions(conn, app, users)
    except psycopg.Error:
        return None
    return None


def old_left(conn: psycopg.Connection, app: str, users: list[str]) -> int:
    return conn.execute(OLD_EPISODES_SQL, (app, users, COMPACTION_RETENTION_DAYS)).fetchone()[0]


def compaction_done(stack: Stack, app: str, chains: dict[str, list[str]]) -> bool:
    try:
        with stack.postgres() as conn:
            return old_left(conn, app, list(chains)) == 0
    except psycopg.Error:
        return False


def check_compaction(
    stack: Stack, app: str, old: list[Turn], chains: dict[str, list[str]], row: Row
) -> None:
    """Every old episode folded exactly once, none left, no error:
    - no episode older than the retention is left for these users;
    - each user's `compacted-episodes` memory has one revision per request of its
      chain (the request, then its continuations), in order, none twice: no request
      was applied twice or skipped;
    - its text holds each old turn's marker exactly once: every episode was folded;
    - no compaction request is in compaction-requests-dlq."""
    users = list(chains)
    problems = []
    try:
        with stack.postgres() as conn:
            left = old_left(conn, app, users)
            revisions = conn.execute(
                "SELECT m.user_id, r.event_id::text FROM memory_revisions r "
                "JOIN memories m ON m.id = r.memory_id WHERE m.app = %s AND m.user_id = ANY(%s) "
                "AND m.entity_name = %s ORDER BY r.id",
                (app, users, COMPACTED_ENTITY),
            ).fetchall()
            texts = dict(
                conn.execute(
                    "SELECT user_id, text FROM memories WHERE app = %s AND user_id = ANY(%s) "
                    "AND entity_name = %s AND valid_to IS NULL",
                    (app, users, COMPACTED_ENTITY),
                ).fetchall()
            )
    except psycopg.Error as exc:
        row.fail(f"compaction not checked: Postgres not readable ({type(exc).__name__})")
        return
    if left:
        problems.append(f"{left} old episodes left")
    folded_once = 0
    for user, chain in chains.items():
        applied = [event_id for u, event_id in revisions if u == user]
        if applied != chain:
            twice = sum(n - 1 for n in Counter(applied).values() if n > 1)
            problems.append(
                f"{user}: {len(applied)} folds applied ({twice} twice), chain of {len(chain)}"
            )
        text = texts.get(user, "")
        counts = [text.count(marker(user, n)) for n in range(OLD_TURNS_PER_USER)]
        folded_once += sum(1 for c in counts if c == 1)
        if any(c != 1 for c in counts):
            problems.append(f"{user}: markers in the summary {counts}")
    dlq = peek(stack, ("compaction-requests",))
    ids = {e for chain in chains.values() for e in chain}
    dead = sum(n for e, n in dlq["compaction-requests"].items() if e in ids) if dlq else 0
    if dead:
        problems.append(f"{dead} compaction requests dead-lettered")
        row.dlq_valid += dead
    requests = sum(len(c) for c in chains.values())
    row.notes.append(
        f"compaction: {len(old)} old episodes of {len(users)} users, {requests} requests "
        f"(batch {COMPACTION_BATCH}); {folded_once}/{len(old)} folded exactly once into "
        f"the summary, {left} left, {len(revisions)} folds applied, {dead} dead-lettered"
    )
    for problem in problems:
        row.fail(f"compaction: {problem}")
