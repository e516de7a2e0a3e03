"""Postgres's disk filled mid-burst: the scenario fills the tmpfs under its data
directory (bench/chaos_suite/mounts.py), holds it full, then frees it."""

from __future__ import annotations

import contextlib
import time
from collections import Counter

import httpx

from bench.chaos_suite.budgets import RESTART_BUDGET, STOP_SECONDS, wait_until
from bench.chaos_suite.faults import Fault
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
    """Every free byte of Postgres's file system taken by a file, for STOP_SECONDS;
    meanwhile the workers' `/readyz` is read every second. Ends when the file is
    gone and Postgres answers (`up` restarts it if it stopped)."""

    label = f"postgres disk full {STOP_SECONDS:.0f}s"

    def __init__(self) -> None:
        self.full_at = 0.0
        self.readiness: dict[str, set[str]] = {}  # worker -> each /readyz reason seen
        self.reads: Counter[str] = Counter()  # the API's answers to a search, each second

    def inject(self, stack: Stack) -> str:
        taken = fill(stack.pg_disk, stack.pg_disk / FILLER)
        self.full_at = time.monotonic()
        return f"filled Postgres's tmpfs ({taken / 2**20:.0f} MiB taken)"

    def end(self, stack: Stack, deadline: float) -> tuple[float | None, str]:
        with stack.client() as client:
            while time.monotonic() < self.full_at + STOP_SECONDS:
                self._read_readiness(stack)
                self._read_memories(client)
                time.sleep(1.0)
        (stack.pg_disk / FILLER).unlink()
        freed_at = time.monotonic()
        if not wait_until(lambda: stack.answers("postgres"), deadline, 0.2):
            return None, f"Postgres did not answer within {RESTART_BUDGET:.0f} s of freeing"
        return time.monotonic(), f"freed; Postgres answers {time.monotonic() - freed_at:.1f}s later"

    def _read_memories(self, client: MemoryClient) -> None:
        """A read of Postgres through the API: it must go on while the disk is full."""
        try:
            client.search("chaos-disk-reader", "what do I prefer?")
            self.reads["200"] += 1
        except MemoryApiError as exc:
            self.reads[f"{exc.status} {exc.code}"] += 1
        except MemoryClientError as exc:
            self.reads[type(exc).__name__] += 1

    def _read_readiness(self, stack: Stack) -> None:
        for worker in WORKERS:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                body = httpx.get(f"{stack.metrics_url(worker)}/readyz", timeout=2).json()
                for name, why in (body.get("reasons") or {}).items():
                    self.readiness.setdefault(worker, set()).add(f"{name}: {why}")


def run_disk_full(ctx: Context, name: str) -> Row:
    """A burst during which Postgres's disk is full: the workers hold (no attempt
    spent, no dead letter, a log line per change of state), their readiness says
    why, and every accepted turn is applied once after the space is freed."""
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
    seen = "; ".join(f"{w}: {', '.join(sorted(r))}" for w, r in fault.readiness.items())
    row.notes.append(f"workers' /readyz reasons seen: {seen or 'none'}")
    reads = ", ".join(f"{n}× {answer}" for answer, n in fault.reads.most_common())
    row.notes.append(f"API memory searches while full: {reads or 'none'}")
    if fault.reads["200"] == 0 or len(fault.reads) > 1:
        row.fail(f"the API did not answer every read while the disk was full ({reads})")
    if not any("postgres: DiskFull" in r for r in fault.readiness.values()):
        row.fail("no worker's /readyz said Postgres was down with DiskFull")
    check_held(stack, row, ctx.last_turns, since, "postgres")
    return row
