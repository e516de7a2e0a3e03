"""What bench/scaling.py reads while the extraction replicas drain a backlog: each
replica's "message handled" log lines, the workers' Postgres backends, and the
CPU time of every process; and the figures of one drain made from them."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench.common import HandledLines, MachineTime, cpu_seconds, log_time, percentile
from shared.localstack.process import ManagedProcess
from shared.localstack.stack import LocalStack

SUBSCRIPTION = "turns-extraction"


@dataclass
class Handled:
    at: float  # epoch seconds of the log line
    duration_ms: float
    replica: str
    key: str  # the ordering key (one user's session)


class HandledLog:
    """One replica's log, read incrementally from where it ended before the run."""

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = path
        self.lines = HandledLines(path, path.stat().st_size if path.exists() else 0)

    def poll(self, handled: dict[str, Handled], problems: Counter) -> None:
        if not self.path.exists():
            return
        for record in self.lines.records():
            if record.get("subscription") != SUBSCRIPTION:
                continue
            if record["outcome"] not in ("acked", "duplicate"):
                problems[record["outcome"]] += 1
                continue
            found = Handled(
                log_time(record), record["duration_ms"], self.name, record.get("session", "")
            )
            handled.setdefault(record["event_id"], found)


# Client backends of the workers, sampled while they drain: waiting on a lock (the
# user's advisory lock), and idle inside a transaction (holding it: the handler
# is waiting on the LLM or the embeddings).
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
    """What the polls of one drain collect: the events the replicas handled (from
    their logs), the outcomes that were not applied, the workers' Postgres backends,
    and the CPU and machine readings at the first applied event."""

    def __init__(self, stack: LocalStack, gemini: ManagedProcess | None, names: list[str]) -> None:
        self.stack, self.gemini, self.names = stack, gemini, names
        self.logs = [HandledLog(name, stack.log_dir / f"{name}.log") for name in names]
        self.handled: dict[str, Handled] = {}
        self.problems: Counter = Counter()
        self.samples: list[tuple[int, int]] = []
        self.at_first: dict = {}

    def cpu(self) -> dict[str, float]:
        return cpu_seconds(self.stack, [self.gemini] if self.gemini else [], tree=True)

    def drained(self, db: psycopg.Connection, count: int) -> bool:
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
        if self.handled and not self.at_first:  # the window starts at the first applied event
            self.at_first.update(cpu=self.cpu(), machine=MachineTime())
        return len(self.handled) >= count


def drain_figures(watch: DrainWatch, events: int, slots: int, cpu_after: dict[str, float]) -> dict:
    """The drain's rate and latency from the handled events, how they spread over
    the replicas, what the backends waited on, and the CPU seconds of each process
    over the drain window (from `cpu_after`, a reading at its end)."""
    handled, names, samples = list(watch.handled.values()), watch.names, watch.samples
    times = sorted(h.at for h in handled)
    window = times[-1] - times[0]
    durations = [h.duration_ms for h in handled]
    rate = events / window
    tenth = len(times) // 10  # the middle 80%: no start-up, no tail
    middle = (len(times) - 2 * tenth) / (times[-tenth - 1] - times[tenth])
    share = Counter(h.replica for h in handled)
    firsts = {n: min(h.at for h in handled if h.replica == n) for n in share}
    cpu = {k: round(v - watch.at_first["cpu"].get(k, 0.0), 1) for k, v in cpu_after.items()}
    return {
        "drain_seconds": round(window, 1),
        "events_per_second": round(rate, 2),
        "p50_ms": round(statistics.median(durations)),
        "p99_ms": round(percentile(durations, 99)),
        "slots_busy": rate * statistics.mean(durations) / 1000 / slots,
        "retried": watch.problems["retried"],
        "middle_per_second": round(middle, 2),
        "per_replica": [share[n] for n in names],
        "first_event_after_s": [round(firsts.get(n, 0) - times[0], 1) for n in names],
        "same_user_overlaps": overlaps(handled),
        "lock_waiters_mean": round(statistics.mean(s[0] for s in samples), 2),
        "lock_waiters_max": max(s[0] for s in samples),
        "idle_in_transaction_mean": round(statistics.mean(s[1] for s in samples), 1),
        "cpu_seconds": cpu,
        "cores_busy": sum(cpu.values()) / window,
    }
