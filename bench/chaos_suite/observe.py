"""What the stack holds, read straight from its stores, logs and dead-letter queues:
each turn once in its session (Valkey) and once in `episodes` (Postgres), and each
event concluded by the summary worker."""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import valkey

from bench.chaos_suite.budgets import DLQ_CHECK_SECONDS, POLL_SECONDS, wait_until
from bench.chaos_suite.burst import Turn
from bench.chaos_suite.console import say
from bench.chaos_suite.stack import Stack, read_text
from shared.session_buffer import SessionBuffer, SessionKey

DLQS = ("turns-summary", "turns-extraction", "compaction-requests")


@dataclass
class Observation:
    """How many times each turn is in its session (buffer or folded) and in the archive,
    and which events the summary worker concluded. None: that store could not be read."""

    buffer: dict[tuple[str, str, str], int] | None
    archive: dict[tuple[str, str, str], int] | None
    handled: set[str]
    problems: list[str] = field(default_factory=list)

    def readable(self, target: str) -> bool:
        return {"buffer": self.buffer, "archive": self.archive}.get(target, {}) is not None

    def count(self, target: str, turn: Turn) -> int:
        if target == "summary":
            return int(turn.expected_event_id in self.handled)
        found = self.buffer if target == "buffer" else self.archive
        return 0 if found is None else found.get(turn.key, 0)


def observe(stack: Stack, app: str, turns: Iterable[Turn]) -> Observation:
    turns = list(turns)
    sessions = sorted({(t.user_id, t.session_id) for t in turns})
    users = sorted({t.user_id for t in turns})
    problems = []
    buffer: dict[tuple[str, str, str], int] | None = Counter()
    try:
        reader = SessionBuffer(stack.valkey, 3600)  # reads only: no TTL is touched
        for user, session in sessions:
            view = reader.read(SessionKey(app, user, session), with_folds=True)
            placed = [t.turn_id for t in view.turns]
            placed += [turn_id for folded in view.folds.values() for turn_id in folded]
            for turn_id in placed:
                buffer[(user, session, turn_id)] += 1
    except valkey.ValkeyError as exc:
        buffer = None
        problems.append(f"Valkey not readable ({type(exc).__name__})")
    archive: dict[tuple[str, str, str], int] | None = Counter()
    try:
        with stack.postgres() as conn:
            rows = conn.execute(
                "SELECT user_id, session_id, turn_id, count(*) FROM episodes "
                "WHERE app = %s AND user_id = ANY(%s) GROUP BY 1, 2, 3",
                (app, users),
            ).fetchall()
        archive = Counter({(u, s, t): n for u, s, t, n in rows})
    except psycopg.Error as exc:
        archive = None
        problems.append(f"Postgres not readable ({type(exc).__name__})")
    return Observation(buffer, archive, set(stack.summary_handled()), problems)


# buffer: the turn is in its session once; archive: in `episodes` once; summary: the
# summary worker concluded its event.
TARGETS = ("buffer", "archive", "summary")
TARGET_DLQ = {"buffer": "turns-summary", "archive": "turns-extraction", "summary": "turns-summary"}


def missing(
    turns: Iterable[Turn], obs: Observation, targets: tuple[str, ...]
) -> list[tuple[Turn, str]]:
    return [(t, target) for t in turns for target in targets if obs.count(target, t) == 0]


def all_dead_lettered(pending: list[tuple[Turn, str]], dlq: dict[str, Counter[str]]) -> bool:
    return all(t.expected_event_id in dlq[TARGET_DLQ[target]] for t, target in pending)


@dataclass
class Settled:
    at: float | None  # time.monotonic() when every turn was applied; None if never
    why: str  # when not: why the wait ended
    obs: Observation


def settle(
    stack: Stack,
    app: str,
    turns: list[Turn],
    deadline: float,
    targets: tuple[str, ...] = TARGETS,
    also: Callable[[], bool] | None = None,
) -> Settled:
    """Poll until every turn is in every target (and `also()` holds), until `deadline`,
    or until every missing one is in a dead-letter queue (it will not come by itself)."""
    last_dlq = time.monotonic()
    while True:
        obs = observe(stack, app, turns)
        pending = missing(turns, obs, targets) if not obs.problems else [(t, "") for t in turns]
        if not pending and (also is None or also()):
            return Settled(time.monotonic(), "", obs)
        now = time.monotonic()
        if now >= deadline:
            what = "; ".join(obs.problems) or f"{len(pending)} (turn, store) pairs missing"
            return Settled(None, f"not applied by the deadline ({what})", obs)
        if pending and not obs.problems and now - last_dlq >= DLQ_CHECK_SECONDS:
            dlq = peek(stack, ("turns-summary", "turns-extraction"))
            last_dlq = time.monotonic()
            if dlq is not None and all_dead_lettered(pending, dlq):
                return Settled(None, f"the {len(pending)} missing are dead-lettered", obs)
        time.sleep(POLL_SECONDS)


def peek(stack: Stack, subscriptions: Iterable[str] = DLQS) -> dict[str, Counter[str]] | None:
    """Event ids waiting in each dead-letter queue (read, handed back); None when
    the emulator does not answer (an empty read would look like an empty queue)."""
    if not stack.answers("pubsub-emulator"):
        return None
    names = list(subscriptions)
    try:
        queues = stack.queues  # made once, before the threads that share it
        with ThreadPoolExecutor(len(names)) as pool:
            found = pool.map(lambda n: queues.peek(n), names)
            return {
                name: Counter(letter.event_id or letter.message_id for letter in letters)
                for name, letters in zip(names, found, strict=True)
            }
    except Exception as exc:  # the emulator went away during the read
        say(f"    (dead-letter queues not readable: {type(exc).__name__})")
        return None


def wait_peek(
    stack: Stack,
    subscriptions: Iterable[str],
    wanted: Callable[[dict[str, Counter[str]]], bool],
    deadline: float,
) -> tuple[bool, dict[str, Counter[str]] | None]:
    """Peek every second until `wanted` holds of what is read, or until `deadline`:
    whether it held, and the last read (None: not readable)."""
    names = tuple(subscriptions)
    last: dict[str, Counter[str]] | None = None

    def check() -> bool:
        nonlocal last
        last = peek(stack, names)
        return last is not None and wanted(last)

    return wait_until(check, deadline, interval=1.0), last


def handled_event_ids(path: Path) -> set[str]:
    """Every event a worker's log shows concluded, whatever the outcome."""
    found = set()
    for line in read_text(path).splitlines():
        if '"message handled"' in line:
            with contextlib.suppress(ValueError):
                found.add(json.loads(line).get("event_id"))
    return found
