"""What a scenario is given, and the steps scenarios share: a fault injected into a
running burst, and the recovery and tally of the row at the end."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from bench.chaos_suite.budgets import RESTART_BUDGET, SEND_BUDGET
from bench.chaos_suite.burst import Burst, Turn
from bench.chaos_suite.console import say
from bench.chaos_suite.faults import Fault
from bench.chaos_suite.observe import Settled, observe, peek
from bench.chaos_suite.report import Row, tally
from bench.chaos_suite.stack import Stack


@dataclass
class Context:
    stack: Stack
    app: str
    run: str
    turns: int
    rate: float
    global_end: float
    last_turns: list[Turn] = field(default_factory=list)  # the last burst's, for checks after

    def until(self, seconds: float) -> float:
        return min(time.monotonic() + seconds, self.global_end)

    def users(self, scenario: str, count: int) -> list[str]:
        return [f"chaos-{self.run}-{scenario}-u{k}" for k in range(count)]


def inject(
    ctx: Context, row: Row, fault: Fault, burst: Burst, where: str, *, emulator: bool = False
) -> tuple[float, float | None]:
    """Inject `fault` into the running `burst` (`where`: how far it got), wait for the
    fault's end, then for the burst's last turn. Returns when the fault was injected
    and when it ended (time.monotonic()); the end is None when it never came: the row
    is then tallied as the stack is, and failed. `emulator`: the fault kills the
    Pub/Sub emulator; what it held counts apart, and its dead letters are not read."""
    stack = ctx.stack
    stack.remember_descendants()
    injected_at = time.monotonic()
    detail = fault.inject(stack)
    row.at = f"{injected_at - burst.started:.1f}s ({where})"
    row.notes.append(f"fault: {detail} at {row.at}")
    say(f"    {detail} at {row.at}")
    ended_at, how = fault.end(stack, ctx.until(RESTART_BUDGET))
    row.notes.append(f"fault end: {how}")
    say(f"    {how}")
    if ended_at is None:
        # Nothing will bring it back: measure what the stack holds now.
        burst.stop()
        burst.join(ctx.until(20))
        obs = observe(stack, ctx.app, burst.turns)
        dlq = None if emulator else peek(stack)
        tally(row, burst.turns, obs, dlq, emulator_killed_at=injected_at if emulator else None)
        row.recovery = "never (not restarted)"
        row.recovered = False
        row.fail(how)
        return injected_at, None
    burst.join(ctx.until(SEND_BUDGET + 20))
    return injected_at, ended_at


def recovery(row: Row, settled: Settled, ended_at: float, failure: str = "") -> None:
    """The row's recovery: from the fault's end until every turn was applied, or a
    failure (`failure` says of which turns)."""
    if settled.at is not None:
        row.recovery = f"{settled.at - ended_at:.1f}s"
    else:
        row.recovery = "no"
        row.recovered = False
        row.fail(f"{failure}{settled.why}")


def finish(row: Row, settled: Settled, ended_at: float, turns: list[Turn], stack: Stack) -> None:
    recovery(row, settled, ended_at)
    tally(row, turns, settled.obs, peek(stack))
