"""The scenarios of a process of the stack killed, terminated or stopped mid-burst."""

from __future__ import annotations

import signal
import time

from bench.chaos_suite.budgets import APPLY_BUDGET, POLL_SECONDS, SEND_BUDGET
from bench.chaos_suite.burst import Burst, Turn, make_turns
from bench.chaos_suite.compaction import (
    check_compaction,
    compaction_done,
    old_turns,
    prepare_old_episodes,
    request_compactions,
    wait_first_fold,
)
from bench.chaos_suite.faults import Fault, Kill
from bench.chaos_suite.observe import missing, observe, peek, settle
from bench.chaos_suite.report import Row, tally
from bench.chaos_suite.scenario import Context, finish, inject, recovery


def run_fault_scenario(
    ctx: Context, name: str, fault: Fault, *, compaction: bool = False, count: int = 0
) -> Row:
    """A burst (of `count` turns, else the run's number) with `fault` injected after
    a third of it (for compaction: once the compaction worker has applied its first
    fold of the requests sent mid-burst)."""
    stack = ctx.stack
    row = Row(name, fault.label)
    users = ctx.users(name, 4 if compaction else 3)
    turns = make_turns(ctx.app, users, 2, count or ctx.turns, "t")
    ctx.last_turns = turns
    chains: dict[str, list[str]] = {}
    old: list[Turn] = []
    if compaction:
        old = old_turns(ctx.app, users)
        if not prepare_old_episodes(ctx, old, row):
            return row
    burst = Burst(stack, turns, ctx.rate).start()
    if compaction:
        burst.wait_sent(len(turns) // 4, ctx.until(60))
        chains = request_compactions(stack, users, row)
        done = wait_first_fold(stack, ctx.app, users, ctx.until(15))
        total = sum(len(c) for c in chains.values())
        where = f"{done}/{total} folds applied" if done else "no fold applied in 15 s"
    else:
        burst.wait_sent(len(turns) // 3, ctx.until(60))
        where = f"{burst.sent}/{len(turns)} sent"
    _injected_at, ended_at = inject(ctx, row, fault, burst, where)
    if ended_at is None:
        return row
    accepted = [t for t in turns if t.event_id]
    also = None
    if compaction:

        def also() -> bool:
            return compaction_done(stack, ctx.app, chains)

    settled = settle(stack, ctx.app, accepted, ctx.until(APPLY_BUDGET), also=also)
    finish(row, settled, ended_at, turns, stack)
    if compaction:
        check_compaction(stack, ctx.app, old, chains, row)
    return row


def run_emulator_kill(ctx: Context, name: str) -> Row:
    """The emulator killed mid-burst: what it held undelivered dies with it (counted
    apart); after `up` restarts it, turns recorded then must all be applied, and
    nothing else may be missing."""
    stack = ctx.stack
    fault = Kill("pubsub-emulator", signal.SIGKILL)
    row = Row(name, fault.label)
    users = ctx.users(name, 3)
    turns = make_turns(ctx.app, users, 2, ctx.turns, "t")
    burst = Burst(stack, turns, ctx.rate).start()
    burst.wait_sent(len(turns) // 3, ctx.until(60))
    where = f"{burst.sent}/{len(turns)} sent"
    killed_at, ended_at = inject(ctx, row, fault, burst, where, emulator=True)
    if ended_at is None:
        return row
    # Recorded after the restart: these must all arrive.
    after = make_turns(ctx.app, users, 2, 20, "after")
    Burst(stack, after, ctx.rate).start().join(ctx.until(SEND_BUDGET + 20))
    later = [t for t in turns + after if t.published_from and t.published_from >= killed_at]
    settled = settle(stack, ctx.app, later, ctx.until(APPLY_BUDGET))
    recovery(row, settled, ended_at, "turns accepted after the kill: ")
    # What workers had pulled before the kill is applied within seconds; what the
    # emulator alone held is gone. Wait until the count stops moving.
    everything = [t for t in turns + after if t.event_id]
    stable_since, last = time.monotonic(), -1
    deadline = ctx.until(30)
    while time.monotonic() < deadline and time.monotonic() - stable_since < 5:
        obs = observe(stack, ctx.app, everything)
        now = len(missing(everything, obs, ("buffer", "archive")))
        if now != last:
            stable_since, last = time.monotonic(), now
        if now == 0:
            break
        time.sleep(POLL_SECONDS)
    tally(
        row,
        turns + after,
        observe(stack, ctx.app, everything),
        peek(stack),
        emulator_killed_at=killed_at,
    )
    row.notes.append(
        "lost w/ emulator: accepted before the kill, not applied since (Pub/Sub itself "
        "would not lose them); 'lost' counts any other"
    )
    return row
