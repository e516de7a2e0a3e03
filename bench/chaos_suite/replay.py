"""`agent-memory dlq replay turns-summary` of valid and invalid dead letters put
straight into turns-summary-dlq."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

from bench.chaos_suite.budgets import APPLY_BUDGET, REPLAY_BUDGET, wait_until
from bench.chaos_suite.burst import Turn, make_turns
from bench.chaos_suite.console import say
from bench.chaos_suite.invalid import (
    Invalid,
    RawMessage,
    invalid_applied,
    invalid_events,
    publish_raw,
)
from bench.chaos_suite.observe import (
    Observation,
    handled_event_ids,
    observe,
    peek,
    settle,
    wait_peek,
)
from bench.chaos_suite.report import Row, tally
from bench.chaos_suite.scenario import Context, recovery
from bench.chaos_suite.stack import Stack, agent_memory
from shared.bus.attributes import (
    DEAD_LETTER_ATTEMPT,
    DEAD_LETTER_ORDERING_KEY,
    DEAD_LETTER_REASON,
    DEAD_LETTER_SUBSCRIPTION,
)


def run_dlq_replay(ctx: Context, name: str) -> Row:
    """Valid turn events (never recorded otherwise) and invalid ones put straight into
    turns-summary-dlq, then `agent-memory dlq replay turns-summary`. It must end; the
    valid ones are then applied once in the buffer and not archived (the replay is for
    turns-summary only); the invalid ones are back in turns-summary-dlq once each;
    turns-extraction-dlq gets none of them.

    The events are of an app of their own and the replay is given `--app` so that it
    touches only this scenario's dead letters (earlier scenarios may have left some)."""
    stack = ctx.stack
    app = f"chaos-{ctx.run}-replay"
    row = Row(name, "dlq replay turns-summary")
    users = ctx.users(name, 2)
    valid = make_turns(app, users, 2, 20, "dead")
    sessions = sorted({(t.user_id, t.session_id) for t in valid})
    invalid = invalid_events(app, sessions, f"{ctx.run}r", each=1)
    extraction_before = place(ctx, row, valid, invalid)
    ended_at = replay(stack, app, row)
    settled = settle(stack, app, valid, ctx.until(APPLY_BUDGET), targets=("buffer", "summary"))
    recovery(row, settled, ended_at)
    obs = check_valid(ctx, app, row, valid)
    check_invalid(ctx, row, valid, invalid, extraction_before)
    applied = invalid_applied(obs, invalid)
    if applied:
        row.fail(f"{applied} invalid events applied")
    return row


def ours(valid: list[Turn], invalid: list[Invalid]) -> set[str]:
    return {t.event_id for t in valid} | {i.event_id for i in invalid}


def place(ctx: Context, row: Row, valid: list[Turn], invalid: list[Invalid]) -> int:
    """Put the events into turns-summary-dlq as the worker dead-letters them; how
    many of them turns-extraction-dlq held before."""
    stack = ctx.stack
    messages = []
    for turn in valid:
        turn.event_id, turn.attempts = turn.expected_event_id, 1
        message = turn.event(turn.event_id)
        messages.append((message.data, message.attributes, message.ordering_key))
    messages += [i.raw for i in invalid]
    placed_ids = ours(valid, invalid)
    before = peek(stack, ("turns-extraction",))
    extraction_before = (
        sum(n for e, n in before["turns-extraction"].items() if e in placed_ids) if before else 0
    )
    publish_raw(stack, "turns-summary-dlq", dead_letters(messages))
    placed, _ = wait_peek(
        stack,
        ("turns-summary",),
        lambda d: all(d["turns-summary"][e] for e in placed_ids),
        ctx.until(30),
    )
    row.sent = row.accepted = len(valid)
    row.at = f"{len(valid)} valid + {len(invalid)} invalid in turns-summary-dlq"
    if not placed:
        row.fail("the dead letters put into turns-summary-dlq did not show up in it")
    return extraction_before


def check_valid(ctx: Context, app: str, row: Row, valid: list[Turn]) -> Observation:
    """Each valid event once in the buffer, concluded by the summary worker, and
    not archived."""
    stack = ctx.stack
    # The extraction worker sees the replayed messages too (the emulator ignores
    # subscription filters): wait until it has concluded each, then read the archive.
    extraction_log = stack.log_dir / "extraction.log"
    concluded = wait_until(
        lambda: {t.event_id for t in valid} <= handled_event_ids(extraction_log),
        ctx.until(15),
    )
    if not concluded:
        row.notes.append("the extraction worker did not log every replayed event in 15 s")
    obs = observe(stack, app, valid)
    tally(row, valid, obs, peek(stack), targets=("buffer", "summary"))
    archived = 0 if obs.archive is None else sum(1 for t in valid if obs.archive.get(t.key))
    row.archive_once = f"{archived} (want 0)"
    if archived:
        row.fail(f"{archived} replayed events archived: the replay reached turns-extraction")
    return obs


def check_invalid(
    ctx: Context, row: Row, valid: list[Turn], invalid: list[Invalid], extraction_before: int
) -> None:
    """Each invalid event back in turns-summary-dlq once; turns-extraction-dlq as it was."""
    placed_ids = ours(valid, invalid)
    _, dlq = wait_peek(
        ctx.stack,
        ("turns-summary", "turns-extraction"),
        lambda d: all(d["turns-summary"][i.event_id] for i in invalid),
        ctx.until(20),
    )
    back = sum(dlq["turns-summary"][i.event_id] for i in invalid) if dlq else 0
    extraction_after = (
        sum(n for e, n in dlq["turns-extraction"].items() if e in placed_ids) if dlq else 0
    )
    row.dlq_invalid = f"{back}/{len(invalid)} back"
    row.notes.append(
        f"invalid: {back} back in turns-summary-dlq (want each of {len(invalid)} once); "
        f"turns-extraction-dlq: {extraction_before} of ours before, {extraction_after} after"
    )
    if dlq is None or any(dlq["turns-summary"][i.event_id] != 1 for i in invalid):
        row.fail(f"invalid events back in turns-summary-dlq: {back}, want each once")
    if extraction_after != extraction_before:
        row.fail(f"turns-extraction-dlq changed: {extraction_after - extraction_before} added")


def dead_letters(messages: list[RawMessage]) -> list[RawMessage]:
    """`messages` as the worker dead-letters them from turns-summary (no ordering key:
    the original one travels as an attribute)."""
    return [
        (
            data,
            {
                **attributes,
                DEAD_LETTER_REASON: "placed by bench/chaos.py",
                DEAD_LETTER_SUBSCRIPTION: "turns-summary",
                DEAD_LETTER_ATTEMPT: "5",
                DEAD_LETTER_ORDERING_KEY: key,
            },
            "",
        )
        for data, attributes, key in messages
    ]


def replay(stack: Stack, app: str, row: Row) -> float:
    """Run `agent-memory dlq replay turns-summary --app <app>` within REPLAY_BUDGET
    (killed after it), noting how it ended in `row`; returns when it ended."""
    argv = [*agent_memory(), "dlq", "replay", "turns-summary", "--app", app]
    say(f"    {' '.join(argv[-5:])} (budget {REPLAY_BUDGET:.0f} s)")
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=stack.environment(),
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=REPLAY_BUDGET)
        ended_at = time.monotonic()
        last = (out.strip().splitlines() or ["(no output)"])[-1]
        row.notes.append(
            f"replay ended in {ended_at - started:.1f} s, exit {process.returncode}: {last}"
        )
        if process.returncode != 0:
            row.fail(f"dlq replay exited {process.returncode}: {err.strip()[-200:]}")
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        ended_at = time.monotonic()
        replayed = err.count("replayed ")
        row.notes.append(
            f"replay did not end within {REPLAY_BUDGET:.0f} s (killed) after {replayed} "
            "re-publishes; the dead letters it held stay leased to it for the dead-letter "
            "subscription's ack deadline (600 s)"
        )
        row.fail(f"dlq replay did not end within {REPLAY_BUDGET:.0f} s")
    say(f"    {row.notes[-1]}")
    return ended_at
