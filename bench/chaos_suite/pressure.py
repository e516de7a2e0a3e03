"""A resource at its limit: Valkey at its memory limit (`maxmemory` with
`noeviction`, as Memorystore runs it) during a burst, and the check that the
workers held for a dependency (shared with the other outages)."""

from __future__ import annotations

import time

from bench.chaos_suite.budgets import STOP_SECONDS
from bench.chaos_suite.burst import Turn
from bench.chaos_suite.faults import Fault
from bench.chaos_suite.logs import dependency_lines, spent_attempts
from bench.chaos_suite.outages import run_fault_scenario
from bench.chaos_suite.report import Row
from bench.chaos_suite.scenario import Context
from bench.chaos_suite.stack import Stack


class ValkeyFull(Fault):
    """`maxmemory` set below what Valkey holds (every write that adds memory is
    refused with OOM), for STOP_SECONDS; then the limit it had before."""

    label = f"valkey maxmemory<used noeviction {STOP_SECONDS:.0f}s"

    def __init__(self) -> None:
        self.before: dict[str, str] = {}
        self.full_at = 0.0

    def inject(self, stack: Stack) -> str:
        client = stack.valkey
        self.before = {
            k: str(v) for k, v in client.config_get("maxmemory*").items() if k in LIMIT_KEYS
        }
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", str(used // 2))
        self.full_at = time.monotonic()
        return f"maxmemory {used // 2} bytes (used {used}), noeviction"

    def end(self, stack: Stack, deadline: float) -> tuple[float | None, str]:
        time.sleep(max(0.0, self.full_at + STOP_SECONDS - time.monotonic()))
        for key, value in self.before.items():
            stack.valkey.config_set(key, value)
        return time.monotonic(), f"maxmemory back to {self.before.get('maxmemory', '0')}"


LIMIT_KEYS = ("maxmemory", "maxmemory-policy")


def run_valkey_full(ctx: Context, name: str) -> Row:
    """A burst during which Valkey refuses writes: turns are refused with 503
    `valkey_full` and `Retry-After` (the harness retries them, as a client would),
    what was accepted before waits in the summary worker without spending an
    attempt, and everything is applied once when memory is back."""
    since = ctx.stack.log_offsets()
    row = run_fault_scenario(ctx, name, ValkeyFull())
    turns = ctx.last_turns
    refused = [t for t in turns if any(r.startswith("503 valkey_full") for r in t.refusals)]
    hints = {r for t in refused for r in t.refusals if r.startswith("503 valkey_full")}
    row.notes.append(f"{len(refused)} turns refused with {', '.join(sorted(hints)) or '-'}")
    if not refused:
        row.fail("no turn was refused with 503 valkey_full")
    elif not all("retry-after" in h for h in hints):
        row.fail("a valkey_full 503 without Retry-After")
    check_held(ctx.stack, row, turns, since, "valkey")
    return row


def check_held(
    stack: Stack, row: Row, turns: list[Turn], since: dict[str, int], dependency: str
) -> None:
    """The workers held for `dependency` (a log line each time it went down and came
    back, not one per message) and spent no delivery attempt of these turns."""
    spent = spent_attempts(stack, [t.expected_event_id for t in turns], since)
    if spent:
        row.fail(f"{len(spent)} delivery attempts spent: {spent[:3]}")
    lines = dependency_lines(stack, dependency, since)
    row.notes.append(
        f"worker log lines about {dependency}: "
        + (", ".join(f"{n}× {what}" for what, n in lines.most_common()) or "none")
    )
    if not lines:
        row.fail(f"no worker logged {dependency} down")
    per_message = sum(lines.values()) > max(20, len(turns) // 4)
    if per_message:
        row.fail(f"{sum(lines.values())} dependency log lines: one per message, not per change")
