"""Process supervision for `agent-memory up`: the names of service replicas, when
an exited process is started again and how a component is, and how a group of
processes is stopped within a deadline."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable

import httpx
import psutil
import structlog

from services.dev.localstack.process import ManagedProcess, tail
from shared.waiting import poll

log = structlog.get_logger("agent_memory.up")

HEALTHY_AFTER_SECONDS = 60.0
# The longest wait before a restart. A service that keeps exiting is mostly its own
# fault (a bad setting): 30 s. A component (Postgres, Valkey, the emulator) that
# cannot start is mostly the machine's (a full disk): every service waits on it,
# a failed start costs under a second, and it must be back within seconds of the
# cause being fixed, not half a minute later.
SERVICE_BACKOFF_SECONDS = 30.0
COMPONENT_BACKOFF_SECONDS = 4.0
KILL_WAIT_SECONDS = 0.5


class ProcessExited(RuntimeError):
    """A process exited while it was waited for; the message quotes its log."""


def replica_name(kind: str, number: int) -> str:
    """The process name of replica `number` (from 1) of a service kind: the first
    keeps the kind's own name (and log file), the others add their number."""
    return kind if number == 1 else f"{kind}-{number}"


def service_kind(name: str) -> str:
    kind, _, number = name.rpartition("-")
    return kind if kind and number.isdigit() else name


class RestartBackoff:
    """When an exited process is due to start again: 1, 2, 4 … `longest` seconds
    after its last start. A process that ran a minute starts its backoff over."""

    def __init__(self, longest: float = SERVICE_BACKOFF_SECONDS) -> None:
        self.longest = longest
        self.restarts: dict[str, int] = {}

    def due(self, name: str, proc: ManagedProcess, stopping: bool) -> bool:
        """Exited, and its backoff has passed; counts the restart."""
        if proc.running and time.monotonic() - proc.started_at > HEALTHY_AFTER_SECONDS:
            self.restarts[name] = 0
        if proc.running or stopping:
            return False
        count = self.restarts.get(name, 0)
        if time.monotonic() - proc.started_at < min(self.longest, 2.0**count):
            return False
        self.restarts[name] = count + 1
        return True


def stop_group(procs: list[ManagedProcess], timeout: float) -> None:
    """Ask each to stop; at the deadline kill every straggler at once (with its
    process group: postgres backends go with their postmaster)."""
    for proc in procs:
        proc.request_stop()
    deadline = time.monotonic() + timeout
    stragglers = [p for p in procs if not p.wait(deadline - time.monotonic())]
    for proc in stragglers:
        log.warning("killing a process that did not stop in time", name=proc.name)
    for proc in procs:
        # Also when the leader is gone: what is left of its group goes with it
        # (killing an empty group does nothing).
        proc.send(signal.SIGKILL)
    kill_deadline = time.monotonic() + KILL_WAIT_SECONDS
    for proc in procs:
        proc.wait(kill_deadline - time.monotonic())
        proc.close_log()


def alive(pids: list[int]) -> list[int]:
    """`pids` but the zombies: they hold nothing, whoever reaps them."""
    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                found.append(pid)
    return found


def wait_answering(proc: ManagedProcess, what: str, health_url: str, timeout: float) -> None:
    """Wait until `health_url` answers 200: ProcessExited as soon as `proc` exits,
    TimeoutError at the deadline."""

    def answers() -> bool:
        if not proc.running:
            raise ProcessExited(
                f"{what} exited with code {proc.exit_code()}; log {proc.log_path}:\n"
                f"{tail(proc.log_path)}"
            )
        try:
            return httpx.get(health_url, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    poll(answers, timeout, f"{what} to answer", interval=0.1)


def restart_component(
    proc: ManagedProcess,
    start: Callable[[], object],
    restarts: int,
    paused: list[ManagedProcess],
    started: Callable[[], None],
) -> None:
    """The same component on the same port and data (`start`), after what is left
    of its process group, with `paused` stopped (SIGSTOP) until `started` ran.
    (PostgreSQL's backends each lead a session of their own; they exit once they
    notice the postmaster gone, and until then a new postmaster refuses their
    shared memory: the start fails and is tried again at the next check.)"""
    log.error(
        "component exited; restarting it",
        component=proc.name,
        exit_code=proc.exit_code(),
        restarts=restarts,
        log_tail=tail(proc.log_path, 5),
    )
    proc.send(signal.SIGKILL)
    proc.close_log()
    for service in paused:
        service.send(signal.SIGSTOP)
    try:
        poll(lambda: not alive(proc.group_pids()), 10, f"{proc.name}'s group to exit", 0.05)
        start()
        started()
    except Exception as exc:  # tried again at its next restart check
        log.error("component did not start again; retrying", component=proc.name, error=str(exc))
        proc.send(signal.SIGKILL)
        return
    finally:
        for service in paused:
            service.send(signal.SIGCONT)
    log.warning("component restarted", component=proc.name, pid=proc.pid)
