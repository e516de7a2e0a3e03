"""Postgres's disk filled mid-burst: the scenario fills the tmpfs under its data
directory (bench/chaos_suite/mounts.py), holds it full, then frees it."""

from __future__ import annotations

import contextlib
import time
from collections import Counter

import httpx
import psycopg

from bench.chaos_suite.budgets import RESTART_BUDGET, STOP_SECONDS, wait_until
from bench.chaos_suite.faults import Fault, after_hold
from bench.chaos_suite.mounts import fill
from bench.chaos_suite.outages import run_fault_scenario
from bench.chaos_suite.pressure import check_held
from bench.chaos_suite.report import Row
from bench.chaos_suite.scenario import Context
from bench.chaos_suite.stack import Stack
from shared.client import MemoryClient
from shared.client.errors import MemoryApiError, MemoryClientError

FILLER = "chaos-filler"
WORKERS = ("summary", "extraction")


class DiskFull(Fault):
    """Every free byte of Postgres's file system taken by a file, for STOP_SECONDS.

    For the first half Postgres runs on a full disk: a write that needs a new page
    fails with DiskFull, reads go on. Then its WAL is made to need a new segment
    (transactions and `pg_switch_wal()` until a switch finds no recycled segment
    to reuse): Postgres cannot write its WAL, stops with a PANIC, and cannot start
    again until space is freed. Without this, where the WAL happened to be when the
    disk filled decided which of the two a run saw. Meanwhile the workers'
    `/readyz` and a search through the API are read every second. Ends when the
    file is gone and Postgres answers (`up` starts it again)."""

    label = f"postgres disk full {STOP_SECONDS:.0f}s, WAL full half-way"

    def __init__(self) -> None:
        self.full_at = 0.0
        self.pg_log_from = 0
        self.crash = ""  # why Postgres went down, when the WAL could not grow
        # phase ("full", "crashed") -> worker -> each /readyz reason seen
        self.readiness: dict[str, dict[str, set[str]]] = {"full": {}, "crashed": {}}
        # phase -> the API's answers to a search, each second
        self.reads: dict[str, Counter[str]] = {"full": Counter(), "crashed": Counter()}

    def inject(self, stack: Stack) -> str:
        self.pg_log_from = (stack.log_dir / "postgres.log").stat().st_size
        # A checkpoint first: it keeps the WAL segments it no longer needs as the
        # next ones, so the WAL goes on while the disk is full until it is made to
        # grow (in one run of the whole suite the WAL needed a new segment at once,
        # and Postgres stopped before the first read).
        with contextlib.suppress(psycopg.OperationalError), stack.postgres() as conn:
            conn.execute("CHECKPOINT")
        taken = fill(stack.pg_disk, stack.pg_disk / FILLER)
        self.full_at = time.monotonic()
        return f"filled Postgres's tmpfs ({taken / 2**20:.0f} MiB taken)"

    def end(self, stack: Stack, deadline: float) -> tuple[float | None, str]:
        with stack.client() as client:
            # Postgres may go down before the switches, if its WAL was at a segment's end.
            if self._observe(stack, client, "full", self.full_at + STOP_SECONDS / 2):
                exhaust_wal(stack)
            if not stack.answers("postgres"):
                self.crash = panic_line(stack, self.pg_log_from)
            self._observe(stack, client, "crashed", self.full_at + STOP_SECONDS)
        (stack.pg_disk / FILLER).unlink()
        freed_at = time.monotonic()
        if not wait_until(lambda: stack.answers("postgres"), after_hold(deadline), 0.2):
            return None, f"Postgres did not answer within {RESTART_BUDGET:.0f} s of freeing"
        return time.monotonic(), f"freed; Postgres answers {time.monotonic() - freed_at:.1f}s later"

    def _observe(self, stack: Stack, client: MemoryClient, phase: str, until: float) -> bool:
        """Read every second until `until`; False as soon as a read failed because
        Postgres went down (that read counts as one while it was down)."""
        while time.monotonic() < until:
            self._read_readiness(stack, self.readiness[phase])
            answer = read_memories(client)
            if phase == "full" and answer != "200" and not stack.answers("postgres"):
                self.reads["crashed"][answer] += 1
                return False
            self.reads[phase][answer] += 1
            time.sleep(1.0)
        return True

    def _read_readiness(self, stack: Stack, seen: dict[str, set[str]]) -> None:
        for worker in WORKERS:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                body = httpx.get(f"{stack.metrics_url(worker)}/readyz", timeout=2).json()
                for name, why in (body.get("reasons") or {}).items():
                    seen.setdefault(worker, set()).add(f"{name}: {why}")


def read_memories(client: MemoryClient) -> str:
    """A read of Postgres through the API: its answer."""
    try:
        client.search("chaos-disk-reader", "what do I prefer?")
        return "200"
    except MemoryApiError as exc:
        return f"{exc.status} {exc.code}"
    except MemoryClientError as exc:
        return type(exc).__name__


# More switches than a 2 GiB file system holds 16 MiB segments: one of them must
# create a segment.
MAX_WAL_SWITCHES = 200


def exhaust_wal(stack: Stack) -> None:
    """Make Postgres need a new WAL segment on its full disk (it then stops)."""
    with contextlib.suppress(psycopg.OperationalError), stack.postgres() as conn:
        # DiskFull (an OperationalError): the commit itself could not be written.
        for _ in range(MAX_WAL_SWITCHES):
            conn.execute("SELECT pg_current_xact_id()")  # a commit record: WAL to switch
            conn.execute("SELECT pg_switch_wal()")


def panic_line(stack: Stack, since: int) -> str:
    """Why Postgres went down, from its log after `since`."""
    with open(stack.log_dir / "postgres.log", "rb") as f:
        f.seek(since)
        lines = f.read().decode(errors="replace").splitlines()
    panic = next((line for line in lines if "PANIC:" in line), "")
    return panic.split("PANIC:", 1)[-1].strip() if panic else "down, no PANIC logged"


def run_disk_full(ctx: Context, name: str) -> Row:
    """A burst during which Postgres's disk is full, then its WAL too: the workers
    hold (no attempt spent, no dead letter, a log line per change of state), their
    readiness says why, the API answers reads while Postgres runs and 503
    `postgres_*` while it is down, and every accepted turn is applied once after
    the space is freed (`up` starts Postgres again within seconds)."""
    stack = ctx.stack
    if stack.pg_disk_unmounted:
        row = Row(name, DiskFull.label, recovery="not run")
        row.fail(f"cannot make the fault: {stack.pg_disk_unmounted}")
        return row
    since = stack.log_offsets()
    fault = DiskFull()
    # Turns all through the fault: a full disk fails only the writes that need new
    # space, so a short burst could pass through it unharmed.
    count = int(ctx.rate * STOP_SECONDS * 1.5)
    row = run_fault_scenario(ctx, name, fault, count=count)
    for phase, readiness in fault.readiness.items():
        seen = "; ".join(f"{w}: {', '.join(sorted(r))}" for w, r in readiness.items())
        row.notes.append(f"workers' /readyz reasons while {phase}: {seen or 'none'}")
    reads = {
        phase: ", ".join(f"{n}x {answer}" for answer, n in found.most_common()) or "none"
        for phase, found in fault.reads.items()
    }
    row.notes.append(f"API memory searches while full: {reads['full']}")
    row.notes.append(f"Postgres went down: {fault.crash or 'no'}")
    row.notes.append(f"API memory searches while Postgres was down: {reads['crashed']}")
    full, crashed = fault.reads["full"], fault.reads["crashed"]
    if full["200"] == 0 or len(full) > 1:
        row.fail(f"the API did not answer every read while the disk was full ({reads['full']})")
    if not fault.crash:
        row.fail("cannot make the fault: Postgres still answered with its WAL unable to grow")
    elif not crashed or any(not a.startswith("503 postgres_") for a in crashed):
        row.fail(f"reads while Postgres was down were not 503 postgres_* ({reads['crashed']})")
    if not any("postgres: DiskFull" in r for r in fault.readiness["full"].values()):
        row.fail("no worker's /readyz said Postgres was down with DiskFull")
    check_held(stack, row, ctx.last_turns, since, "postgres")
    return row
