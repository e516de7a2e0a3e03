"""Workers whose clocks disagree with the rest of the stack: extra summary and
extraction replicas started under libfaketime (Debian's `faketime`), one pair
5 minutes ahead and one 5 minutes behind, beside the stack's own workers.

Only the wall clock is skewed (FAKETIME_DONT_FAKE_MONOTONIC), as on a machine
whose clock is off: durations (leases, timeouts, backoffs) run on the monotonic
clock. With the monotonic clock faked too, a wait on a lock or an event (which
glibc times on the real monotonic clock) would last the offset. The workers run
through `skewed_worker.py`, which works around libfaketime 0.9.10's broken
monotonic `time.sleep` (see there). Before the burst the row checks, under the
same command, that the clock is off by the offset and that a sleep and a wait
last what they should; it fails with the reason when not."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from bench.chaos_suite.budgets import SEND_BUDGET, wait_until
from bench.chaos_suite.burst import Burst, Turn
from bench.chaos_suite.faults import Fault
from bench.chaos_suite.logs import worker_records
from bench.chaos_suite.outages import run_fault_scenario
from bench.chaos_suite.report import Row
from bench.chaos_suite.scenario import Context
from bench.chaos_suite.stack import Stack, read_text

SKEWS = (("summary", "+5m"), ("extraction", "+5m"), ("summary", "-5m"), ("extraction", "-5m"))
OFFSET_SECONDS = {"+5m": 300.0, "-5m": -300.0}
LAUNCHER = Path(__file__).with_name("skewed_worker.py")


def skewed(offset: str, *args: str) -> list[str]:
    """The command that runs `agent-memory *args` with its wall clock `offset` off."""
    faketime = shutil.which("faketime")
    assert faketime is not None  # run_skewed_clocks checked
    return [faketime, "-f", offset, sys.executable, str(LAUNCHER), *args]


def skewed_environment(env: dict[str, str]) -> dict[str, str]:
    return {**env, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def log_name(kind: str, offset: str) -> str:
    return f"{kind}-skew{'plus' if offset.startswith('+') else 'minus'}{offset[1:]}.log"


class SkewedWorkers(Fault):
    """Starts the skewed replicas and, at the scenario's end, stops them. They are
    started before the burst (`start`), since they take seconds to start and a
    burst of seconds would be over; the fault's injection mid-burst only notes it."""

    label = "4 workers, clocks +5 min and -5 min"

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def inject(self, stack: Stack) -> str:
        return f"{len(self.procs)} skewed workers running since before the burst"

    def start(self, stack: Stack, deadline: float) -> str:
        """Start them and wait until each pulls: "" or why they did not."""
        env = skewed_environment(stack.environment())
        env.pop("AM_METRICS_PORT", None)
        for kind, offset in SKEWS:
            with open(stack.log_dir / log_name(kind, offset), "ab") as log:
                self.procs.append(
                    subprocess.Popen(
                        skewed(offset, "worker", kind),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        env=env,
                        start_new_session=True,
                    )
                )
        stack.cleanups.append(self.stop)

        def started() -> bool:
            return all(
                '"worker started"' in read_text(stack.log_dir / log_name(kind, offset))
                for kind, offset in SKEWS
            )

        return "" if wait_until(started, deadline, 0.5) else "the skewed workers did not start"

    def end(self, stack: Stack, deadline: float) -> tuple[float | None, str]:
        return time.monotonic(), "they run until the burst is applied"

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        self.procs.clear()


def probe_skew(offset: str) -> str:
    """ "" when a Python run as the skewed workers run has its wall clock `offset`
    off (within 30 s) and sleeps and waits as long as asked, else why not."""
    before = time.time()
    try:
        result = subprocess.run(
            skewed(offset, "--probe"),
            capture_output=True,
            text=True,
            timeout=30,
            env=skewed_environment(dict(os.environ)),
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"under faketime {offset}, the probe (a 0.1 s sleep and wait) ran over 30 s"
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["?"])[-1]
        return f"under faketime {offset}, the probe failed: {last[:160]}"
    seen = json.loads(result.stdout)
    off = seen["wall"] - before
    if abs(off - OFFSET_SECONDS[offset]) > 30:
        return f"under faketime {offset}, the clock was {off:+.0f} s off, not {offset}"
    for what in ("slept", "waited"):
        if not 0.09 <= seen[what] < 5:
            return f"under faketime {offset}, a 0.1 s {what[:-2]} lasted {seen[what]:.2f} s"
    return ""


def logged_offset(path: Path) -> float | None:
    """How far the clock of the worker logging to `path` is off: its last record's
    timestamp against the file's modification time (the kernel's clock, which
    libfaketime does not touch in this process)."""
    modified = path.stat().st_mtime
    for line in reversed(read_text(path).splitlines()):
        if line.startswith("{"):
            try:
                stamp = json.loads(line).get("timestamp")
            except ValueError:
                continue
            if stamp:
                return datetime.fromisoformat(stamp).timestamp() - modified
    return None


def check_offsets(stack: Stack, row: Row) -> None:
    """Each skewed worker's clock, as its own log shows it, is off by its offset."""
    seen = []
    for kind, offset in SKEWS:
        path = stack.log_dir / log_name(kind, offset)
        off = logged_offset(path)
        seen.append(f"{path.stem} {'?' if off is None else f'{off:+.0f}'} s")
        if off is None or abs(off - OFFSET_SECONDS[offset]) > 30:
            row.fail(f"{path.stem}'s log is not {offset} off the kernel's clock")
    row.notes.append("clocks in their logs: " + ", ".join(seen))


WINDOWS_SQL = "SELECT count(*) FROM extraction_pending WHERE app = %s AND user_id = ANY(%s)"


def check_windows(ctx: Context, stack: Stack, users: list[str], row: Row) -> None:
    """Two turns more per user, each in a session of its own: windows that only the
    idle sweep closes. The database's clock decides it, so they close after the
    idle time, not at once (a sweep 5 minutes ahead by its own clock would), and
    not 5 minutes late (one behind), and are extracted."""
    idle = stack.settings.extraction_window_seconds if stack.settings else 30.0
    turns = [
        Turn(ctx.app, user, f"{user}-idle", f"idle-{k}", f"Turn {k} before a pause.")
        for user in users
        for k in range(2)
    ]
    Burst(stack, turns, ctx.rate).start().join(ctx.until(SEND_BUDGET))
    sent = time.monotonic()
    if not all(t.event_id for t in turns):
        row.fail("the idle windows' turns were not all accepted")
        return
    with stack.postgres() as conn:

        def count() -> int:
            return conn.execute(WINDOWS_SQL, (ctx.app, users)).fetchone()[0]

        waiting = wait_until(lambda: count() == len(turns), ctx.until(30), 0.2)
        closed = wait_until(lambda: count() == 0, ctx.until(idle + 60), 0.5)
    after = time.monotonic() - sent
    if not waiting:
        row.fail("the idle windows' turns never all waited in their windows")
    elif not closed:
        row.fail(f"idle windows still open {after:.0f} s after their last turn")
    else:
        row.notes.append(f"idle windows closed and extracted {after:.0f} s after their last turn")
        if after < idle * 0.8:
            row.fail(f"idle windows closed after {after:.0f} s, before the idle {idle:.0f} s")


def run_skewed_clocks(ctx: Context, name: str) -> Row:
    """A burst handled by the stack's workers and by four whose clocks are 5 minutes
    off: nothing lost, doubled or dead-lettered, and each skewed worker handled
    some of it (else the row proves nothing)."""
    stack = ctx.stack
    fault = SkewedWorkers()
    if shutil.which("faketime") is None:
        row = Row(name, fault.label, recovery="not run")
        row.fail(
            "cannot make the fault: the faketime command is missing (apt-get install faketime)"
        )
        return row
    broken = next(filter(None, (probe_skew(offset) for offset in OFFSET_SECONDS)), "")
    if broken:
        row = Row(name, fault.label, recovery="not run")
        row.fail(f"cannot make the fault: {broken}")
        return row
    since = stack.log_offsets()
    try:
        failed = fault.start(stack, ctx.until(60))
        if failed:
            row = Row(name, fault.label, recovery="not run")
            row.fail(failed)
            return row
        row = run_fault_scenario(ctx, name, fault, count=ctx.turns * 2)
        check_offsets(stack, row)
        check_windows(ctx, stack, ctx.users(name, 3), row)
    finally:
        fault.stop()
        if fault.stop in stack.cleanups:
            stack.cleanups.remove(fault.stop)
    handled: dict[str, int] = {}
    for kind, offset in SKEWS:
        path = stack.log_dir / log_name(kind, offset)
        handled[path.stem] = sum(
            1
            for line in read_text(path).splitlines()
            if '"message handled"' in line and ctx.run in line
        )
    row.notes.append(
        "handled by skewed workers: " + ", ".join(f"{k} {n}" for k, n in handled.items())
    )
    idle = [k for k, n in handled.items() if n == 0]
    if idle:
        row.fail(f"skewed workers handled nothing: {', '.join(idle)}")
    retried = [
        r
        for r in worker_records(stack, since)
        if r.get("message") == "message handled"
        and r.get("outcome") in ("retried", "dead_lettered")
    ]
    if retried:
        row.fail(f"{len(retried)} messages retried or dead-lettered")
    return row
