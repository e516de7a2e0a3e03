"""Leases under strain: an outage longer than a message's lease and the
subscription's ack deadline, and a CPU saturated by processes of the suite's own.
Either way no message may come back (delivery attempt 2) while a worker holds it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

from bench.chaos_suite.faults import Fault, Pause
from bench.chaos_suite.logs import spent_attempts
from bench.chaos_suite.outages import run_fault_scenario
from bench.chaos_suite.pressure import check_held
from bench.chaos_suite.report import Row
from bench.chaos_suite.scenario import Context
from bench.chaos_suite.stack import Stack

# Longer than the subscriptions' ack deadline (30 s) and several lease extensions
# (AM_LEASE_EXTENSION_SECONDS, 10 s): a lease not kept would show.
LONG_OUTAGE_SECONDS = 45.0
SATURATION_SECONDS = 30.0
BURNERS_PER_CORE = 2


def run_long_outage(ctx: Context, name: str) -> Row:
    """Valkey stopped for LONG_OUTAGE_SECONDS mid-burst: the summary worker holds
    what it has, what is queued and what waits behind its ordering keys; none of it
    is redelivered, no attempt is spent."""
    since = ctx.stack.log_offsets()
    row = run_fault_scenario(ctx, name, Pause("valkey", LONG_OUTAGE_SECONDS))
    check_held(ctx.stack, row, ctx.last_turns, since, "valkey")
    return row


class Saturation(Fault):
    """BURNERS_PER_CORE busy loops per core for SATURATION_SECONDS: the workers,
    the emulator and Postgres get a fraction of the CPU they want."""

    label = f"CPU saturated {SATURATION_SECONDS:.0f}s"

    def __init__(self) -> None:
        self.burners: list[subprocess.Popen] = []
        self.started = 0.0

    def inject(self, stack: Stack) -> str:
        count = BURNERS_PER_CORE * (os.cpu_count() or 1)
        for _ in range(count):
            self.burners.append(
                subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            )
        stack.cleanups.append(self.stop)
        self.started = time.monotonic()
        return f"{count} busy loops on {os.cpu_count()} cores"

    def end(self, stack: Stack, deadline: float) -> tuple[float | None, str]:
        time.sleep(max(0.0, self.started + SATURATION_SECONDS - time.monotonic()))
        self.stop()
        stack.cleanups.remove(self.stop)
        return time.monotonic(), f"busy loops stopped after {SATURATION_SECONDS:.0f}s"

    def stop(self) -> None:
        for burner in self.burners:
            with contextlib.suppress(ProcessLookupError):
                burner.kill()
            burner.wait(5)
        self.burners.clear()


def run_saturation(ctx: Context, name: str) -> Row:
    """A burst through a saturated CPU: slower, and no message redelivered."""
    since = ctx.stack.log_offsets()
    count = int(ctx.rate * SATURATION_SECONDS)
    row = run_fault_scenario(ctx, name, Saturation(), count=count)
    spent = spent_attempts(ctx.stack, [t.expected_event_id for t in ctx.last_turns], since)
    row.notes.append(f"delivery attempts spent: {len(spent)}")
    if spent:
        row.fail(f"{len(spent)} messages redelivered or retried: {spent[:3]}")
    return row
