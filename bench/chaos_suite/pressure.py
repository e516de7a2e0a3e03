"""The scenarios of a resource at its limit: Valkey at its memory limit (`maxmemory`
with `noeviction`, as Memorystore runs it) during a burst, and more turns than the
workers drain (overload)."""

from __future__ import annotations

import statistics
import threading
import time

import psutil

from bench.chaos_suite.budgets import APPLY_BUDGET, SEND_BUDGET, STOP_SECONDS
from bench.chaos_suite.burst import Burst, Turn, make_turns
from bench.chaos_suite.console import say
from bench.chaos_suite.faults import Fault
from bench.chaos_suite.logs import dependency_lines, spent_attempts
from bench.chaos_suite.observe import settle
from bench.chaos_suite.outages import run_fault_scenario
from bench.chaos_suite.report import Row
from bench.chaos_suite.scenario import Context, finish
from bench.chaos_suite.stack import Stack
from shared.bus.overview import read_overview


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


# Overload: how much faster than the workers drain the burst must be, and how long.
OVERLOAD_FACTOR = 2.0
OVERLOAD_SECONDS = 20.0
SAMPLE_SECONDS = 1.0


class Sampler:
    """The console's figures (backlog, oldest unsettled age, events per second of
    each subscription) and the API's resident memory, every SAMPLE_SECONDS."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.samples: list[tuple[float, dict[str, tuple[int, float | None, float]], int]] = []
        self.missed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        settings = self.stack.settings
        assert settings is not None
        api_pid = self.stack.pids()["api"][0]
        while not self._stop.wait(SAMPLE_SECONDS):
            try:
                overview = read_overview(self.stack.valkey, settings)
                rss = psutil.Process(api_pid).memory_info().rss
            except Exception:  # a figure missed is a gap in the samples, not a failure
                self.missed += 1
                continue
            figures = {
                s.subscription: (s.backlog, s.oldest_unacked_seconds, s.events_per_second)
                for s in overview.subscriptions
            }
            self.samples.append((time.monotonic(), figures, rss))

    def peak(self, subscription: str) -> tuple[int, float]:
        backlogs = [f[subscription][0] for _t, f, _r in self.samples if subscription in f]
        ages = [f[subscription][1] or 0.0 for _t, f, _r in self.samples if subscription in f]
        return max(backlogs, default=0), max(ages, default=0.0)

    def drain_rate(self, subscription: str, after: float) -> float:
        """The median events per second settled while a backlog waited."""
        rates = [
            f[subscription][2]
            for t, f, _r in self.samples
            if t >= after and subscription in f and f[subscription][0] > 0
        ]
        return statistics.median(rates) if rates else 0.0

    def rss_growth(self) -> int:
        values = [r for _t, _f, r in self.samples]
        return max(values) - values[0] if values else 0


def run_overload(ctx: Context, name: str) -> Row:
    """Turns sent for OVERLOAD_SECONDS at OVERLOAD_FACTOR times what the slowest
    subscription drains (measured in the same run, from the figures): the backlog
    must grow and then drain to zero, the API's latency and memory stay bounded,
    nothing is lost or doubled."""
    stack = ctx.stack
    row = Row(name, f"{OVERLOAD_FACTOR:g}x the drain rate for {OVERLOAD_SECONDS:.0f}s")
    rate = ctx.rate * 4
    users = ctx.users(name, 12)
    turns = make_turns(ctx.app, users, 4, int(rate * OVERLOAD_SECONDS), "t")
    for turn in turns:  # a turn of a real conversation: its extraction costs more than its record
        turn.text += LONG_TURN
    sampler = Sampler(stack).start()
    began = time.monotonic()
    burst = Burst(stack, turns, rate, threads=24).start()
    burst.join(ctx.until(OVERLOAD_SECONDS + SEND_BUDGET))
    sent_for = time.monotonic() - began
    row.at = f"{len(turns)} turns in {sent_for:.1f}s"
    accepted = [t for t in turns if t.event_id]
    settled = settle(stack, ctx.app, accepted, ctx.until(APPLY_BUDGET * 2))
    sampler.stop()
    finish(row, settled, began + sent_for, turns, stack)
    say(f"    sent {len(turns)} at {len(turns) / sent_for:.0f}/s")
    worst, worst_rate = "", float("inf")
    for sub in ("turns-summary", "turns-extraction"):
        backlog, age = sampler.peak(sub)
        drained = sampler.drain_rate(sub, began)
        row.notes.append(
            f"{sub}: backlog peaked at {backlog}, oldest {age:.0f}s, drained {drained:.1f}/s"
        )
        if drained and drained < worst_rate:
            worst, worst_rate = sub, drained
    offered = len(accepted) / sent_for
    if worst:
        row.notes.append(f"offered {offered:.0f}/s = x{offered / worst_rate:.1f} of {worst}")
        if offered / worst_rate < OVERLOAD_FACTOR:
            row.fail(f"not overloaded: x{offered / worst_rate:.1f} of the drain rate")
    else:
        row.fail("no backlog seen in the figures: not overloaded")
    latencies = sorted(t.latency for t in accepted if t.latency is not None)
    if latencies:
        p99 = latencies[int(0.99 * (len(latencies) - 1))]
        row.notes.append(
            f"API latency p50 {statistics.median(latencies) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
        )
        if p99 > API_P99_BOUND:
            row.fail(f"API p99 {p99:.1f}s over {API_P99_BOUND:.0f}s")
    growth = sampler.rss_growth()
    row.notes.append(f"API memory grew {growth / 2**20:.0f} MiB")
    if growth > API_RSS_BOUND:
        row.fail(f"API memory grew {growth / 2**20:.0f} MiB")
    return row


LONG_TURN = (
    " I moved to Lisbon last spring and work as a data engineer at a logistics firm;"
    " my manager is Ana, we ship the routing service on Fridays, I prefer Python over"
    " Go for tooling, my daughter starts school in September, and I am allergic to"
    " peanuts, so please keep that in mind when you suggest restaurants near Alfama."
) * 2
API_P99_BOUND = 2.0  # seconds: a turn's record stays fast while the workers lag
API_RSS_BOUND = 200 * 2**20
