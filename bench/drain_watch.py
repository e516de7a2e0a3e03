"""What bench/scaling.py reads while the extraction replicas drain a backlog: the
ledger rows of the backlog's turns, each replica's "message handled" log lines,
the workers' Postgres backends, and the CPU time of every process; and the
figures of one drain made from them.

A turn is drained when its ledger row (`processed_events`, consumer
`turns-extraction`) exists: with extraction windows, acking its
`turns-extraction` message only archives it and puts it in its session's window;
its memories are written, with that row, when an `extraction-requests` message
extracts the window."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench.common import HandledLines, MachineTime, cpu_seconds, log_time, percentile
from services.dev.localstack.process import ManagedProcess
from services.dev.localstack.stack import LocalStack

SUBSCRIPTION = "turns-extraction"  # a turn archived and put in its window
REQUESTS = "extraction-requests"  # a window extracted
LEDGER = (
    "SELECT extract(epoch FROM processed_at) FROM processed_events "
    "WHERE consumer = 'turns-extraction' AND event_id = ANY(%s::uuid[])"
)


@dataclass
class Handled:
    at: float  # epoch seconds of the log line
    duration_ms: float
    replica: str
    key: str  # the ordering key (one user's session)
    subscription: str
    outcome: str


class HandledLog:
    """One replica's log, read incrementally from where it ended before the run."""

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = path
        self.lines = HandledLines(path, path.stat().st_size if path.exists() else 0)
        self.redelivered: list[str] = []  # what came back, for the report

    def poll(self, handled: dict[str, Handled], problems: Counter) -> None:
        if not self.path.exists():
            return
        for record in self.lines.records():
            subscription = record.get("subscription")
            if subscription not in (SUBSCRIPTION, REQUESTS):
                continue
            if int(record.get("delivery_attempt") or 1) > 1:
                problems["redelivered"] += 1  # a lease that ran out, or a lost pull or ack
                first = handled.get(record["event_id"])
                self.redelivered.append(
                    f"{subscription} {record['event_id'][:8]} attempt "
                    f"{record['delivery_attempt']} {record['outcome']} in {self.name}"
                    + (f", {log_time(record) - first.at:.1f}s after the first" if first else "")
                )
            if record["outcome"] not in ("applied", "duplicate"):
                problems[record["outcome"]] += 1
                continue
            found = Handled(
                log_time(record),
                record["duration_ms"],
                self.name,
                record.get("session", ""),
                subscription,
                record["outcome"],
            )
            handled.setdefault(record["event_id"], found)


# Client backends of the workers, sampled while they drain: waiting on a lock (the
# user's advisory lock), and idle inside a transaction (holding its connection
# between statements; no model or embedding call happens inside one).
ACTIVITY = (
    "SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'), "
    "count(*) FILTER (WHERE state = 'idle in transaction') "
    "FROM pg_stat_activity WHERE backend_type = 'client backend' "
    "AND datname = current_database() AND pid <> pg_backend_pid()"
)


def overlaps(handled: list[Handled]) -> dict[str, int]:
    """Events whose handler started while the previous event of their ordering key
    (their user) was still in a handler, in the same replica or in another."""
    by_key: dict[str, list[tuple[float, float, str]]] = {}
    for h in handled:
        by_key.setdefault(h.key, []).append((h.at - h.duration_ms / 1000, h.at, h.replica))
    found = Counter({"same replica": 0, "other replica": 0})
    for spans in by_key.values():
        spans.sort()
        for a, b in zip(spans, spans[1:], strict=False):
            if b[0] < a[1] - 0.01:
                found["same replica" if a[2] == b[2] else "other replica"] += 1
    return dict(found)


class DrainWatch:
    """What the polls of one drain collect: the ledger rows of the backlog's turns,
    the messages the replicas handled (from their logs: turns archived, windows
    extracted), the outcomes that were not applied, the workers' Postgres backends,
    and the CPU and machine readings at the first handled message."""

    def __init__(
        self,
        stack: LocalStack,
        gemini: ManagedProcess | None,
        names: list[str],
        event_ids: list[str],
    ) -> None:
        self.stack, self.gemini, self.names = stack, gemini, names
        self.event_ids = event_ids
        self.logs = [HandledLog(name, stack.log_dir / f"{name}.log") for name in names]
        self.handled: dict[str, Handled] = {}
        self.problems: Counter = Counter()
        self.samples: list[tuple[int, int]] = []
        self.at_first: dict = {}
        self.extracted: list[float] = []  # epoch seconds of each ledger row, when drained

    def cpu(self) -> dict[str, float]:
        return cpu_seconds(self.stack, [self.gemini] if self.gemini else [], tree=True)

    def drained(self, db: psycopg.Connection) -> bool:
        for log in self.logs:
            log.poll(self.handled, self.problems)
        if self.handled:
            self.samples.append(db.execute(ACTIVITY).fetchone())
        if self.problems["dead_lettered"]:
            raise SystemExit(
                f"extraction dead-lettered events: {dict(self.problems)}; see {self.names}"
            )
        for name in self.names:
            proc = self.stack.service_procs[name]
            if not proc.running:
                raise SystemExit(f"{name} exited with {proc.exit_code()}; see {proc.log_path}")
        if self.handled and not self.at_first:  # the window starts at the first handled message
            self.at_first.update(cpu=self.cpu(), machine=MachineTime())
        extracted = [row[0] for row in db.execute(LEDGER, (self.event_ids,)).fetchall()]
        if len(extracted) < len(self.event_ids):
            return False
        self.extracted = sorted(float(at) for at in extracted)
        return True


def drain_figures(watch: DrainWatch, slots: int, cpu_after: dict[str, float]) -> dict:
    """The drain's rate from the ledger rows (from the first handled message to the
    last turn extracted), the handlers' latencies (a turn archived; a window
    extracted), how busy each subscription's handler slots were (`slots` per
    subscription, over all replicas), how the turns spread over the replicas, what
    the backends waited on, and the CPU seconds of each process over the drain
    window (from `cpu_after`, a reading at its end)."""
    handled, names, samples = list(watch.handled.values()), watch.names, watch.samples
    turns = [h for h in handled if h.subscription == SUBSCRIPTION]
    windows = [h for h in handled if h.subscription == REQUESTS and h.outcome == "applied"]
    extracted = watch.extracted
    start = min(h.at - h.duration_ms / 1000 for h in handled)
    window = extracted[-1] - start
    rate = len(extracted) / window
    tenth = len(extracted) // 10  # the middle 80%: no start-up, no tail
    middle = (len(extracted) - 2 * tenth) / (extracted[-tenth - 1] - extracted[tenth])
    share = Counter(h.replica for h in turns)
    firsts = {n: min(h.at for h in handled if h.replica == n) for n in {h.replica for h in handled}}
    cpu = {k: round(v - watch.at_first["cpu"].get(k, 0.0), 1) for k, v in cpu_after.items()}

    def busy(found: list[Handled]) -> float:
        return sum(h.duration_ms for h in found) / 1000 / window / slots

    def ms(found: list[Handled], p: float) -> int:
        return round(percentile([h.duration_ms for h in found], p)) if found else 0

    return {
        "drain_seconds": round(window, 1),
        "events_per_second": round(rate, 2),
        "p50_ms": ms(turns, 50),
        "p99_ms": ms(turns, 99),
        "window_p50_ms": ms(windows, 50),
        "window_p99_ms": ms(windows, 99),
        "windows": len(windows),
        "slots_busy": busy(turns),
        "window_slots_busy": busy(windows),
        "retried": watch.problems["retried"],
        "redelivered": watch.problems["redelivered"],
        "redelivered_examples": [line for log in watch.logs for line in log.redelivered][:4],
        "middle_per_second": round(middle, 2),
        "per_replica": [share[n] for n in names],
        "first_event_after_s": [round(firsts.get(n, start) - start, 1) for n in names],
        "same_user_overlaps": overlaps(turns),
        "lock_waiters_mean": round(statistics.mean(s[0] for s in samples), 2),
        "lock_waiters_max": max(s[0] for s in samples),
        "idle_in_transaction_mean": round(statistics.mean(s[1] for s in samples), 1),
        "cpu_seconds": cpu,
        "cores_busy": sum(cpu.values()) / window,
    }
