"""Faults injected into a process of the stack, and the wait for their end."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import psutil

from bench.chaos_suite.budgets import RESTART_BUDGET, STOP_SECONDS, wait_until
from bench.chaos_suite.stack import SERVICES, Stack, process_alive


class Fault:
    label = ""

    def inject(self, stack: Stack) -> str:
        raise NotImplementedError

    def end(self, stack: Stack, deadline: float) -> tuple[float | None, str]:
        """Wait for the fault's end: (time.monotonic() of it, how it ended) or (None, why not)."""
        raise NotImplementedError


def after_hold(deadline: float) -> float:
    """The deadline of a wait for recovery that follows a hold of the fault's own
    length: `end`'s deadline runs from the injection, so a hold as long as
    RESTART_BUDGET (a full disk, a partition) would leave that wait no time at all,
    and it would fail at once, claiming the budget had passed."""
    return max(deadline, time.monotonic() + RESTART_BUDGET)


class Kill(Fault):
    """A signal to one process of the stack; it ends when `up` has started it again
    (a new pid in pids.json) and, for a component, it answers."""

    def __init__(self, name: str, signum: signal.Signals) -> None:
        self.name, self.signum = name, signum
        sig = "kill -9" if signum == signal.SIGKILL else signum.name
        self.label = f"{sig} {name}"
        self.old: tuple[int, float] | None = None

    def inject(self, stack: Stack) -> str:
        self.old = stack.pids()[self.name]
        os.kill(self.old[0], self.signum)
        return f"{self.label} (pid {self.old[0]})"

    def end(self, stack: Stack, deadline: float) -> tuple[float | None, str]:
        def restarted() -> bool:
            entry = stack.pids().get(self.name)
            if entry is None or entry == self.old or not process_alive(*entry):
                return False
            return self.name in SERVICES or stack.answers(self.name)

        if wait_until(restarted, deadline, interval=0.1):
            return time.monotonic(), f"restarted by up (pid {stack.pids()[self.name][0]})"
        return None, f"{self.name} not restarted by up within {RESTART_BUDGET:.0f} s"


class Pause(Fault):
    """SIGSTOP of a component's whole process group, and of every descendant outside
    it (PostgreSQL's backends and auxiliary processes each call setsid(), so the
    postmaster's group is the postmaster alone); SIGCONT after STOP_SECONDS."""

    def __init__(self, name: str, seconds: float = STOP_SECONDS) -> None:
        self.name = name
        self.seconds = seconds
        self.label = f"SIGSTOP {name} {seconds:.0f}s"
        self.pgid = 0
        self.others: list[int] = []
        self.stopped_at = 0.0

    def inject(self, stack: Stack) -> str:
        self.pgid = stack.pids()[self.name][0]  # each component leads its own group
        stack.paused.append(self)
        # The leader first: a stopped postmaster forks no new backend meanwhile.
        os.killpg(self.pgid, signal.SIGSTOP)
        self.stopped_at = time.monotonic()
        for child in psutil.Process(self.pgid).children(recursive=True):
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                if os.getpgid(child.pid) != self.pgid:
                    os.kill(child.pid, signal.SIGSTOP)
                    self.others.append(child.pid)
        extra = f" and {len(self.others)} descendants in their own groups" if self.others else ""
        return f"SIGSTOP group {self.pgid} ({self.name}){extra}"

    def resume(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signal.SIGCONT)
        for pid in self.others:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)

    def end(self, stack: Stack, deadline: float) -> tuple[float | None, str]:
        # The fault's length, not a wait for an outcome.
        time.sleep(max(0.0, self.stopped_at + self.seconds - time.monotonic()))
        self.resume()
        stack.paused.remove(self)
        return time.monotonic(), f"SIGCONT after {time.monotonic() - self.stopped_at:.1f} s"
