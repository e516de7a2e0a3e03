"""Invalid events published straight onto `turns`: messages the topic's schema
accepts but the workers must dead-letter, once per subscription, and never apply."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

from bench.chaos_suite.budgets import APPLY_BUDGET, SEND_BUDGET
from bench.chaos_suite.burst import Burst, Turn, make_turns
from bench.chaos_suite.console import say
from bench.chaos_suite.observe import TARGET_DLQ, Observation, observe, settle, wait_peek
from bench.chaos_suite.report import Row
from bench.chaos_suite.scenario import Context, finish
from bench.chaos_suite.stack import Stack

# A message as publish_raw takes it: body, attributes, ordering key.
RawMessage = tuple[bytes, dict[str, str], str]


@dataclass
class Invalid:
    event_id: str
    data: bytes
    attributes: dict[str, str]
    ordering_key: str
    case: str
    key: tuple[str, str, str]  # where it would land if it were (wrongly) applied

    @property
    def raw(self) -> RawMessage:
        return (self.data, self.attributes, self.ordering_key)


INVALID_CASES = (
    "unknown event_type",
    "schema_version 9",
    "control character in user_id",
    "app attribute differs from the body",
    "created_at without an offset",
    "event_id not a UUID",
)


def invalid_events(app: str, sessions: list[tuple[str, str]], tag: str, each: int) -> list[Invalid]:
    """Messages that pass the `turns` topic's Avro schema but break a rule only the
    workers know (as in tests/integration/test_dead_letters.py), `each` per case,
    on the ordering keys of real sessions."""
    found = []
    for k in range(each * len(INVALID_CASES)):
        case = INVALID_CASES[k % len(INVALID_CASES)]
        user, session = sessions[k % len(sessions)]
        turn = Turn(
            app,
            user,
            session,
            f"invalid-{tag}-{k:03d}",
            "This event is invalid and must be dead-lettered.",
        )
        message = turn.event(str(uuid.uuid4()))
        record = json.loads(message.data)
        attributes = dict(message.attributes)
        if case == "unknown event_type":
            attributes["event_type"] = "turn.exploded.v1"
        elif case == "schema_version 9":
            attributes["schema_version"] = "9"
        elif case == "control character in user_id":
            record["user_id"] = "bad\x07id"
        elif case == "app attribute differs from the body":
            record["app"] = "someone-else"  # the attribute keeps `app`: a replay filter finds it
        elif case == "created_at without an offset":
            record["created_at"] = "2026-01-01T00:00:00"
        else:
            record["event_id"] = attributes["event_id"] = f"not-a-uuid-{tag}-{k:03d}"
        found.append(
            Invalid(
                attributes["event_id"],
                json.dumps(record).encode(),
                attributes,
                message.ordering_key,
                case,
                turn.key,
            )
        )
    return found


def publish_raw(stack: Stack, topic: str, messages: list[RawMessage]) -> None:
    publisher = stack.publisher
    path = publisher.topic_path(topic)
    futures = [publisher.publish_raw(path, data, attrs, key) for data, attrs, key in messages]
    for future in futures:
        future.result(timeout=30)


def invalid_applied(obs: Observation, invalid: list[Invalid]) -> int:
    return sum(
        1 for i in invalid for found in (obs.buffer, obs.archive) if found and found.get(i.key)
    )


def run_invalid_events(ctx: Context, name: str) -> Row:
    """Invalid events published straight onto `turns` among valid turns: each must be
    dead-lettered once by each subscription, never applied, and block nothing."""
    stack = ctx.stack
    row = Row(name, "invalid events onto turns")
    users = ctx.users(name, 3)
    turns = make_turns(ctx.app, users, 2, ctx.turns, "t")
    sessions = sorted({(t.user_id, t.session_id) for t in turns})
    invalid = invalid_events(ctx.app, sessions, ctx.run, each=2)
    burst = Burst(stack, turns, ctx.rate).start()
    burst.wait_sent(len(turns) // 3, ctx.until(60))
    injected_at = time.monotonic()
    publish_raw(stack, "turns", [i.raw for i in invalid])
    ended_at = time.monotonic()
    row.at = f"{injected_at - burst.started:.1f}s ({burst.sent}/{len(turns)} sent)"
    row.notes.append(
        f"fault: {len(invalid)} invalid events ({len(INVALID_CASES)} cases × 2) published "
        f"onto turns at {row.at}, on the ordering keys of the burst's sessions"
    )
    say(f"    {len(invalid)} invalid events published at {row.at}")
    burst.join(ctx.until(SEND_BUDGET + 20))
    accepted = [t for t in turns if t.event_id]
    settled = settle(stack, ctx.app, accepted, ctx.until(APPLY_BUDGET))
    finish(row, settled, ended_at, turns, stack)
    # Each invalid event must reach both subscriptions' dead letters.
    ids = [i.event_id for i in invalid]
    both = ("turns-summary", "turns-extraction")
    _, dlq = wait_peek(
        stack, both, lambda d: all(d[s][e] for s in both for e in ids), ctx.until(60)
    )
    per_queue = {s: sum(dlq[s][e] for e in ids) if dlq else 0 for s in TARGET_DLQ.values()}
    row.dlq_invalid = f"{per_queue['turns-summary']}+{per_queue['turns-extraction']}"
    row.notes.append(
        f"invalid dead-lettered: {per_queue['turns-summary']} in turns-summary-dlq, "
        f"{per_queue['turns-extraction']} in turns-extraction-dlq (want {len(ids)} each, once)"
    )
    for queue, count in per_queue.items():
        if count != len(ids) or (dlq and any(dlq[queue][e] != 1 for e in ids)):
            row.fail(f"invalid events in {queue}-dlq: {count}, want each of {len(ids)} once")
    applied = invalid_applied(observe(stack, ctx.app, turns), invalid)
    if applied:
        row.fail(f"{applied} invalid events applied")
    return row
