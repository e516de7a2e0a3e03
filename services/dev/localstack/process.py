"""A child process in its own process group, so stopping it stops everything it spawned."""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

import psutil

# Ports the kernel never hands out by itself: below its ephemeral range (Linux's
# default 32768-60999). A port from bind(0) is one the kernel also gives outgoing
# connections, and a database or gRPC client took one between its choice and a
# child's bind ("Address already in use").
_CHOSEN_PORTS = (10000, 32768)


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return _CHOSEN_PORTS[1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, chosen at random
    below the kernel's ephemeral range so that no outgoing connection takes it
    before the process it is meant for binds it."""
    low, high = _CHOSEN_PORTS[0], min(_CHOSEN_PORTS[1], _ephemeral_low())
    tries = [low + secrets.randbelow(high - low) for _ in range(100)] if high > low else []
    for port in [*tries, 0]:  # 0: the kernel's choice, if none of those was free
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise OSError("no free TCP port on 127.0.0.1")


def port_is_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def run_as(user: str | None) -> dict:
    """subprocess arguments that run a child as `user` with only that user's group.

    Without the group change a child of root keeps gid 0 and is refused by
    directories whose group is root and whose group bits are closed."""
    if user is None:
        return {}
    return {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class ManagedProcess:
    """Start, signal and stop one child (and its descendants) with its output in a log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        cwd: Path | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.user = user
        self.cwd = cwd
        self.stop_signal = stop_signal
        self.proc: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None
        self.started_at = 0.0
        self.on_start: Callable[[ManagedProcess], None] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.close_log()  # a restart opens the log again
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
            **run_as(self.user),
        )
        self.started_at = time.monotonic()
        if self.on_start is not None:
            self.on_start(self)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def group_pids(self) -> list[int]:
        """Every live process in the child's process group."""
        if self.proc is None:
            return []
        pgid = self.proc.pid
        found = []
        for proc in psutil.process_iter(["pid"]):
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                if os.getpgid(proc.info["pid"]) == pgid:
                    found.append(proc.info["pid"])
        return found

    def send(self, signum: int) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)

    def request_stop(self) -> None:
        self.send(self.stop_signal)

    def wait(self, timeout: float) -> bool:
        """Wait for the child to exit; True if it did."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return False
        return True

    def kill(self) -> None:
        self.send(signal.SIGKILL)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)

    def stop(self, timeout: float) -> None:
        """Ask the child to stop; kill it (and its group) if it has not within `timeout`."""
        self.request_stop()
        if not self.wait(timeout):
            self.kill()
        self.close_log()

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
