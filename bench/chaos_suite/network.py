"""A silent partition between the stack and one of its stores: every packet to and
from the store's port on the loopback dropped by an nftables table of the suite's
own (no reset: a connection hangs, it does not fail), for PARTITION_SECONDS.

Needs root (CAP_NET_ADMIN) and the `nft` command (Debian's `nftables`); without
them the row fails and says so. The rules match one port on 127.0.0.1 only, and
the table is deleted at the fault's end and again when the stack stops."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from datetime import datetime
from urllib.parse import urlsplit

from bench.chaos_suite.budgets import wait_until
from bench.chaos_suite.faults import Fault, after_hold
from bench.chaos_suite.logs import worker_records
from bench.chaos_suite.outages import run_fault_scenario
from bench.chaos_suite.pressure import check_held
from bench.chaos_suite.report import Row
from bench.chaos_suite.scenario import Context
from bench.chaos_suite.stack import Stack

PARTITION_SECONDS = 30.0
# The stated bound on noticing (docs/operations.md): a request in flight fails by
# its TCP user timeout (Postgres, 10 s) or socket timeout (Valkey, 2 s); an idle
# worker's periodic probe (every AM_DEPENDENCY_PROBE_SECONDS, 10 s, bounded by 2 s)
# notices within 12 s.
NOTICE_BOUND_SECONDS = {"postgres": 15.0, "valkey": 15.0}
URLS = {"postgres": "database_url", "valkey": "valkey_url"}


def nft(script: str) -> str:
    """Run an nft script: "" when it worked, else why not."""
    if os.geteuid() != 0:
        return "dropping packets needs root (run `make chaos` as root)"
    command = shutil.which("nft")
    if command is None:
        return "the nft command is missing (apt-get install nftables; `make chaos` does)"
    result = subprocess.run(
        [command, "-f", "-"], input=script, capture_output=True, text=True, check=False
    )
    return "" if result.returncode == 0 else f"nft failed: {result.stderr.strip()[:200]}"


def drop_port(table: str, port: int) -> str:
    """Drop every packet to and from 127.0.0.1:`port` (table `table`, inet): "" or why not."""
    return nft(
        f"table inet {table} {{\n"
        "  chain out {\n"
        "    type filter hook output priority -10; policy accept;\n"
        f'    oifname "lo" ip daddr 127.0.0.1 tcp dport {port} drop\n'
        f'    oifname "lo" ip saddr 127.0.0.1 tcp sport {port} drop\n'
        "  }\n"
        "}\n"
    )


def undrop(table: str) -> None:
    nft(f"delete table inet {table}\n")


class Partition(Fault):
    def __init__(self, name: str) -> None:
        self.name = name
        self.label = f"silent partition to {name} {PARTITION_SECONDS:.0f}s"
        self.table = f"agent_memory_chaos_{os.getpid()}"
        self.dropped_at = 0.0
        self.wall_at = 0.0

    def port(self, stack: Stack) -> int:
        port = urlsplit(stack.endpoints[URLS[self.name]]).port
        assert port is not None
        return port

    def inject(self, stack: Stack) -> str:
        port = self.port(stack)
        failed = drop_port(self.table, port)
        if failed:
            raise RuntimeError(failed)
        stack.cleanups.append(self.heal)
        self.dropped_at, self.wall_at = time.monotonic(), time.time()
        return f"nft drops every packet to and from 127.0.0.1:{port} ({self.name})"

    def heal(self) -> None:
        undrop(self.table)

    def end(self, stack: Stack, deadline: float) -> tuple[float | None, str]:
        time.sleep(max(0.0, self.dropped_at + PARTITION_SECONDS - time.monotonic()))
        self.heal()
        stack.cleanups.remove(self.heal)
        healed = time.monotonic()
        if not wait_until(lambda: stack.answers(self.name), after_hold(deadline), 0.2):
            return None, f"{self.name} did not answer after the partition healed"
        return time.monotonic(), f"healed after {healed - self.dropped_at:.1f}s"


def run_partition(ctx: Context, name: str, dependency: str) -> Row:
    """A burst during which `dependency` is silently partitioned: every wait ends
    (the workers notice within NOTICE_BOUND_SECONDS, from their logs), they hold
    without spending attempts, and every accepted turn is applied once after."""
    stack = ctx.stack
    fault = Partition(dependency)
    cannot = nft(f"table inet {fault.table} {{ }}\ndelete table inet {fault.table}\n")
    if cannot:
        row = Row(name, fault.label, recovery="not run")
        row.fail(f"cannot make the fault: {cannot}")
        return row
    since = stack.log_offsets()
    row = run_fault_scenario(ctx, name, fault, count=int(ctx.rate * PARTITION_SECONDS))
    noticed = [
        datetime.fromisoformat(r["timestamp"].replace("Z", "+00:00")).timestamp()
        for r in worker_records(stack, since)
        if r.get("dependency") == dependency
        and str(r.get("message", "")).startswith("dependency down")
    ]
    after = sorted(t - fault.wall_at for t in noticed if t >= fault.wall_at)
    bound = NOTICE_BOUND_SECONDS[dependency]
    if after:
        row.notes.append(f"first worker noticed after {after[0]:.1f}s (bound {bound:.0f}s)")
        if after[0] > bound:
            row.fail(f"noticed after {after[0]:.1f}s, over the {bound:.0f}s bound")
    else:
        row.fail("no worker noticed the partition")
    check_held(stack, row, ctx.last_turns, since, dependency)
    return row
