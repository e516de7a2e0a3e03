"""Workers whose clocks disagree with the rest of the stack: extra summary and
extraction replicas started under libfaketime (Debian's `faketime`), one pair
5 minutes ahead and one 5 minutes behind, beside the stack's own workers.

Only the wall clock is skewed (FAKETIME_DONT_FAKE_MONOTONIC), as on a machine
whose clock is off: durations (leases, timeouts, backoffs) run on the monotonic
clock. Debian 12's libfaketime (0.9.10) breaks Python 3.11's `time.sleep` then
(`OSError: [Errno 22] Invalid argument` from its `clock_nanosleep`), and with the
monotonic clock faked too a sleep lasts the offset (5 minutes). The row checks
first that a skewed Python can sleep, and fails with the reason when it cannot:
a fault of the tool, not one the workers meet on a skewed machine."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time

from bench.chaos_suite.budgets import wait_until
from bench.chaos_suite.faults import Fault
from bench.chaos_suite.logs import worker_records
from bench.chaos_suite.outages import run_fault_scenario
from bench.chaos_suite.report import Row
from bench.chaos_suite.scenario import Context
from bench.chaos_suite.stack import Stack, agent_memory, read_text

SKEWS = (("summary", "+5m"), ("extraction", "+5m"), ("summary", "-5m"), ("extraction", "-5m"))


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
        faketime = shutil.which("faketime")
        assert faketime is not None  # run_skewed_clocks checked
        env = stack.environment()
        env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        env.pop("AM_METRICS_PORT", None)
        for kind, offset in SKEWS:
            with open(stack.log_dir / log_name(kind, offset), "ab") as log:
                self.procs.append(
                    subprocess.Popen(
                        [faketime, "-f", offset, *agent_memory(), "worker", kind],
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


def faketime_breaks_sleep() -> str:
    """ "" when a Python under faketime (as the workers run) can sleep, else why not."""
    faketime = shutil.which("faketime")
    assert faketime is not None
    env = {**os.environ, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    try:
        result = subprocess.run(
            [faketime, "-f", "+5m", sys.executable, "-c", "import time; time.sleep(0.01)"],
            capture_output=True,
            text=True,
            timeout=10,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "under faketime, time.sleep(0.01) did not return within 10 s"
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["?"])[-1]
        return f"libfaketime breaks Python's time.sleep ({last[:120]})"
    return ""


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
    broken = faketime_breaks_sleep()
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
