"""What bench/llm_cost.py plays and queues: sessions of the generated recall
conversations (bench/recall_data.py) recorded through the API at an agent's pace
and flushed at their end, a backlog of the same kind of turns published straight
to Pub/Sub, and what Postgres says about them afterwards."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg

from bench.recall_data import generate
from shared.client import AsyncMemoryClient
from shared.events import TurnRecorded, derived_event_id
from shared.memory.worth import skip_reason

APP = "default"
TURNS_SUBSCRIPTION = "turns-extraction"
PER_SEED = 10  # conversations taken from each seed of the generator (it has at most 12)


@dataclass(frozen=True)
class Session:
    user_id: str
    session_id: str
    prev_session_id: str
    turns: list[dict]  # {turn_id, created_at, user, assistant}


@dataclass(frozen=True)
class Recorded:
    event_id: str
    accepted_at: float  # epoch seconds of the 202


def conversations(count: int) -> list[dict]:
    """`count` generated conversations, ten from each seed from 7 on, each tagged
    with its seed (conversation ids repeat across seeds)."""
    found: list[dict] = []
    seed = 7
    while len(found) < count:
        for conv in generate(seed=seed, conversations=PER_SEED)["conversations"]:
            found.append({**conv, "seed": seed})
        seed += 1
    return found[:count]


def agent_users(prefix: str, convs: list[dict], sessions: int) -> list[list[Session]]:
    """Each conversation is one user: its first `sessions` sessions, each naming the
    one before it as `prev_session_id`, as an agent does."""
    users = []
    for conv in convs:
        user = f"{prefix}-{conv['seed']}-{conv['conversation_id']}"
        chain, previous = [], ""
        for session in conv["sessions"][:sessions]:
            session_id = f"{user}-{session['session_id']}"
            chain.append(Session(user, session_id, previous, session["turns"]))
            previous = session_id
        users.append(chain)
    return users


async def play(
    api_url: str, api_key: str, users: list[list[Session]], pace: float
) -> list[Recorded]:
    """Every user at once, each its sessions one after another: a turn every `pace`
    seconds (a fixed schedule, not a pause after each answer), the session flushed
    right after its last turn's 202. The users start spread over one pace."""
    recorded: list[Recorded] = []
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.5

    async def user(sessions: list[Session], at: float) -> None:
        for session in sessions:
            for turn in session.turns:
                await asyncio.sleep(max(0.0, at - loop.time()))
                answer = await client.record_turn(
                    session.session_id,
                    session.user_id,
                    turn["user"],
                    turn["assistant"],
                    prev_session_id=session.prev_session_id or None,
                    turn_id=turn["turn_id"],
                )
                recorded.append(Recorded(answer.event_id, time.time()))
                at += pace
            await client.flush_session(session.session_id, session.user_id)

    async with AsyncMemoryClient(api_url, api_key=api_key, timeout=30.0, retries=5) as client:
        await asyncio.gather(
            *(user(chain, start + i * pace / len(users)) for i, chain in enumerate(users))
        )
    return recorded


def kept(session_turns: list[dict], count: int) -> list[dict]:
    """The session's first turns up to the `count`-th one the extraction filter
    keeps (`shared.memory.worth`): with `count` a multiple of the window, every
    window of the session closes full, whether the filter is on or off, and a
    drain never waits for the idle-window check (AM_EXTRACTION_WINDOW_SECONDS)."""
    taken, worth = [], 0
    for turn in session_turns:
        if worth == count:
            break
        taken.append(turn)
        worth += skip_reason(turn["user"], turn["assistant"]) is None
    if worth < count:
        raise ValueError(f"a session holds only {worth} turns worth extracting")
    return taken


def backlog(prefix: str, convs: list[dict], sessions: range, turns: int) -> list[TurnRecorded]:
    """A backlog to drain: sessions `sessions` of each conversation, each as a user
    of its own with one session (no `prev_session_id`; a user's next session would
    close the previous one's window early), cut to `turns` turns the filter keeps
    (`kept`). Turn k of every session, then turn k+1 ..., as users who talk at once
    queue them."""
    start = datetime.now(UTC) - timedelta(hours=1)
    chains = []
    for conv in convs:
        for index in sessions:
            session = conv["sessions"][index]
            user = f"{prefix}-{conv['seed']}-{session['session_id']}"
            chains.append((user, kept(session["turns"], turns)))
    events = []
    for k in range(max(len(chain) for _user, chain in chains)):
        for user, chain in chains:
            if k >= len(chain):
                continue
            turn = chain[k]
            events.append(
                TurnRecorded(
                    event_id=derived_event_id(APP, user, f"{user}-s", turn["turn_id"]),
                    app=APP,
                    user_id=user,
                    session_id=f"{user}-s",
                    turn_id=turn["turn_id"],
                    created_at=start + timedelta(seconds=k),
                    user=turn["user"],
                    assistant=turn["assistant"],
                )
            )
    return events


def extracted(db: psycopg.Connection, event_ids: list[str]) -> int:
    """How many of these turns have their ledger row: extracted (or skipped)."""
    row = db.execute(
        "SELECT count(*) FROM processed_events WHERE consumer = %s AND event_id = ANY(%s::uuid[])",
        (TURNS_SUBSCRIPTION, event_ids),
    ).fetchone()
    return int(row[0]) if row else 0


def drain_window(db: psycopg.Connection, prefix: str, event_ids: list[str]) -> tuple[float, float]:
    """Epoch seconds of the backlog's first archived turn and of its last ledger row."""
    row = db.execute(
        "SELECT (SELECT extract(epoch FROM min(archived_at)) FROM episodes "
        "        WHERE app = %s AND user_id LIKE %s), "
        "(SELECT extract(epoch FROM max(processed_at)) FROM processed_events "
        "        WHERE consumer = %s AND event_id = ANY(%s::uuid[]))",
        (APP, f"{prefix}-%", TURNS_SUBSCRIPTION, event_ids),
    ).fetchone()
    assert row is not None and row[0] is not None and row[1] is not None
    return float(row[0]), float(row[1])


def visible_after(db: psycopg.Connection, recorded: list[Recorded]) -> list[float]:
    """For each turn that produced a memory, seconds from its 202 to its memory's
    first revision's commit (the revision's `created_at`, its transaction's start:
    the write transactions are short)."""
    accepted = {r.event_id: r.accepted_at for r in recorded}
    rows = db.execute(
        "SELECT event_id::text, extract(epoch FROM min(created_at)) FROM memory_revisions "
        "WHERE event_id = ANY(%s::uuid[]) GROUP BY event_id",
        (list(accepted),),
    ).fetchall()
    return [float(at) - accepted[event_id] for event_id, at in rows]


def written(db: psycopg.Connection, prefix: str) -> dict[str, int]:
    """The live memories and the revisions of the users whose ids start with `prefix`."""
    row = db.execute(
        "SELECT (SELECT count(*) FROM memories WHERE app = %s AND user_id LIKE %s "
        "        AND valid_to IS NULL), "
        "(SELECT count(*) FROM memory_revisions WHERE app = %s AND user_id LIKE %s)",
        (APP, f"{prefix}-%", APP, f"{prefix}-%"),
    ).fetchone()
    assert row is not None
    return {"live memories": int(row[0]), "revisions": int(row[1])}
