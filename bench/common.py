"""Helpers shared by the benchmarks."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import psutil

from services.dev.localstack.process import ManagedProcess
from services.dev.localstack.stack import Endpoints, LocalStack
from shared.config import Settings, load_settings
from shared.logging import configure_logging
from shared.waiting import poll


@contextmanager
def bench_stack(
    services: tuple[str, ...] = ("api", "summary"),
) -> Iterator[tuple[LocalStack, Endpoints, Settings]]:
    """A fresh local stack with `services` (the API and one summary worker by
    default) in a temporary folder, stopped and removed afterwards (SIGTERM
    unwinds to that too)."""
    configure_logging("console", "WARNING")
    data_dir = Path(tempfile.mkdtemp(prefix="agent-memory-bench-"))
    settings = load_settings(database_url=None, valkey_url=None)
    stack = LocalStack(settings, data_dir, services=services, any_api_port=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # The stack points this process's Pub/Sub clients at its emulator: a stack
    # started after this one must not find the address of one that is gone.
    emulator = os.environ.get("PUBSUB_EMULATOR_HOST")
    try:
        endpoints = stack.start()
        yield stack, endpoints, stack.settings
    finally:
        stack.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
        if emulator is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = emulator


def against(took: dict[str, list[float]], base: str) -> dict[str, dict[str, float]]:
    """Each variant's p50 and p99 (ms) and its p50 against `base`'s: timings of one
    run, taken side by side."""
    reference = statistics.median(took[base])
    return {
        name: {
            "p50_ms": round(statistics.median(values), 2),
            "p99_ms": round(percentile(values, 99), 2),
            # Unrounded: a verdict on it must not pass a ratio just over its target.
            "p50_ratio": statistics.median(values) / reference,
        }
        for name, values in took.items()
    }


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile `p` (0-100) of `values`."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def cpu_seconds(
    stack: LocalStack, extra: Iterable[ManagedProcess] = (), tree: bool = False
) -> dict[str, float]:
    """CPU time used so far by each process of the stack (and of `extra`), and by
    this benchmark. By default a process counts its process group; with `tree`, the
    process with all its descendants, live and reaped (PostgreSQL's backends lead
    sessions of their own: not in its process group)."""
    found = {"bench (this process)": sum(psutil.Process().cpu_times()[:2])}
    for proc in [*stack.components, *stack.service_procs.values(), *extra]:
        try:
            found[proc.name] = _tree_cpu(proc) if tree else _group_cpu(proc)
        except psutil.Error:
            continue
    return found


def _group_cpu(proc: ManagedProcess) -> float:
    group = [psutil.Process(pid) for pid in proc.group_pids()]
    return sum(sum(p.cpu_times()[:2]) for p in group)


def _tree_cpu(proc: ManagedProcess) -> float:
    top = psutil.Process(proc.pid)
    total = sum(top.cpu_times()[:4])  # with its reaped children
    with contextlib.suppress(psutil.Error):  # gone meanwhile: what it used until then
        for child in top.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                total += sum(child.cpu_times()[:2])
    return total


def cpu_used(stack: LocalStack, before: dict[str, float]) -> dict[str, float]:
    """CPU seconds each process used since `before` (a `cpu_seconds` reading)."""
    return {
        name: round(value - before.get(name, 0.0), 2) for name, value in cpu_seconds(stack).items()
    }


class MachineTime:
    """What the machine's CPUs did from construction to `report()`, from the first
    line of /proc/stat: the share of their time in which they had work and the
    hypervisor did not run them (steal), and the share they were idle, in percent.

    On a small shared virtual machine the latency tails mostly follow the steal
    (docs/performance.md), so a benchmark prints it beside its figures: a run is
    read with the state of the machine it ran in."""

    FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

    def __init__(self, stat: Path = Path("/proc/stat")) -> None:
        self.stat = stat
        self.started = self._ticks()

    def _ticks(self) -> dict[str, int]:
        try:
            with open(self.stat) as f:
                values = f.readline().split()[1:]
        except OSError:  # not Linux: nothing to report
            return {}
        # (guest time, the fields after steal, is counted in user time already)
        return {name: int(v) for name, v in zip(self.FIELDS, values, strict=False)}

    def report(self) -> dict[str, float]:
        now = self._ticks()
        spent = {name: now[name] - self.started.get(name, 0) for name in now}
        total = sum(spent.values())
        if not total or "steal" not in spent:
            return {}
        return {
            "steal_percent": round(100 * spent["steal"] / total, 2),
            "idle_percent": round(100 * spent["idle"] / total, 2),
        }


def describe_machine(machine: dict[str, float]) -> str:
    if not machine:
        return "machine: no /proc/stat steal counter here"
    return (
        f"machine during the measurement: {machine['steal_percent']}% of the CPU time "
        f"stolen by the hypervisor, {machine['idle_percent']}% idle"
    )


class HandledLines:
    """A worker's log read incrementally from `offset`: the records of its "message
    handled" lines written since the last read. (Re-reading the whole file on every
    poll would take CPU from the worker under test.)"""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset

    def records(self) -> Iterator[dict]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1  # a partly written last line waits for the next read
        self.offset += end
        for line in chunk[:end].splitlines():
            if b'"message handled"' in line:
                yield json.loads(line)


def log_time(record: dict) -> float:
    """Epoch seconds of a log record's timestamp."""
    return datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00")).timestamp()


class AppliedLog:
    """Reads the worker's log incrementally: event_id -> epoch seconds of its first
    "message handled" line, acked or duplicate."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines = HandledLines(path)
        self.applied: dict[str, float] = {}

    def poll(self) -> dict[str, float]:
        for record in self.lines.records():
            # "duplicate": the API had buffered the turn already; the worker's
            # handling (the fold check) is what the lag measures then.
            if record.get("outcome") not in ("applied", "duplicate"):
                continue
            self.applied.setdefault(record["event_id"], log_time(record))
        return self.applied


def wait_applied(log: AppliedLog, event_ids: list[str], timeout: float) -> dict[str, float]:
    def all_applied() -> dict[str, float] | None:
        seen = log.poll()
        return seen if all(e in seen for e in event_ids) else None

    try:
        return poll(all_applied, timeout, f"{len(event_ids)} events applied", interval=0.2)
    except TimeoutError:
        missing = sum(1 for e in event_ids if e not in log.applied)
        raise SystemExit(
            f"{missing} of {len(event_ids)} events not applied in {timeout} s"
        ) from None
