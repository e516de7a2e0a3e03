"""The stack under test: one `agent-memory up` subprocess in a data dir of its own,
the processes it reports, clients of its stores and API, and its stop."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import httpx
import psutil
import psycopg
import valkey

from bench.chaos_suite.budgets import STACK_STOP_BUDGET, START_BUDGET, wait_until
from bench.chaos_suite.mounts import mount_tmpfs, unmount
from bench.common import AppliedLog
from services.dev.localstack.process import free_port, port_is_open
from services.dev.localstack.stack import SERVICES
from shared.bus.dlq import DeadLetterQueues
from shared.bus.publisher import EventPublisher
from shared.client import MemoryClient
from shared.config import Settings, load_settings


class Paused(Protocol):
    """A fault that stopped a process (`faults.Pause`): resumed before the stack stops."""

    def resume(self) -> None: ...


COMPONENTS = ("postgres", "valkey", "pubsub-emulator")
# What `up` must not inherit, or it would use another stack's stores.
STACK_VARIABLES = ("AM_DATABASE_URL", "AM_VALKEY_URL", "PUBSUB_EMULATOR_HOST", "AM_API_PORT")


class StackError(RuntimeError):
    pass


class Stack:
    """One `agent-memory up` subprocess and its data dir."""

    def __init__(self, root: Path, index: int) -> None:
        self.data_dir = root / f"stack-{index}"
        self.up_log = root / f"up-{index}.log"
        self.proc: subprocess.Popen | None = None
        self.endpoints: dict[str, str] = {}
        self.api_key = ""
        self.settings: Settings | None = None
        # Every (pid, create_time) `up` reported, and every descendant seen, so that
        # stop() can finish off what `up` leaves behind. PostgreSQL's children each
        # lead a session of their own: a kill of the postmaster's group misses them.
        self.known: set[tuple[int, float]] = set()
        self.members: set[tuple[int, float]] = set()
        self.paused: list[Paused] = []  # SIGSTOPped by us: SIGCONT before stopping
        self.cleanups: list[Callable[[], None]] = []  # a fault's undoing (nft rules)
        self._valkey: valkey.Valkey | None = None
        self._queues: DeadLetterQueues | None = None
        self._publisher: EventPublisher | None = None
        self._summary_logs: dict[str, AppliedLog] = {}
        # Postgres's data directory, on a tmpfs of the suite's own when it could mount
        # one (the disk-full scenario fills it); else why not.
        self.pg_disk = self.data_dir / "postgres"
        self.pg_disk_unmounted = ""

    # start ------------------------------------------------------------------------
    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in STACK_VARIABLES}
        env["AM_API_PORT"] = str(free_port())
        self.data_dir.mkdir(parents=True)
        self.pg_disk_unmounted = mount_tmpfs(self.pg_disk)
        with open(self.up_log, "ab") as log:
            self.proc = subprocess.Popen(
                [*agent_memory(), "up", "--data-dir", str(self.data_dir)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                # Its own group: a Ctrl-C in the terminal reaches only the harness,
                # which then stops `up` itself.
                start_new_session=True,
            )
        deadline = time.monotonic() + START_BUDGET
        while "agent-memory is up" not in read_text(self.up_log):
            if self.proc.poll() is not None:
                raise StackError(f"agent-memory up exited:\n{tail(self.up_log, 20)}")
            if time.monotonic() > deadline:
                raise StackError(f"agent-memory up not up in {START_BUDGET:.0f} s")
            time.sleep(0.2)
        self.endpoints = json.loads((self.data_dir / "endpoints.json").read_text())
        self.api_key = (self.data_dir / "dev-api-key").read_text().strip()
        self.remember_descendants()
        # The harness's Pub/Sub clients read the emulator's address from here.
        os.environ["PUBSUB_EMULATOR_HOST"] = self.endpoints["pubsub_emulator_host"]
        self.settings = load_settings(
            database_url=self.endpoints["database_url"],
            valkey_url=self.endpoints["valkey_url"],
            pubsub_emulator_host=self.endpoints["pubsub_emulator_host"],
            google_cloud_project=self.endpoints["google_cloud_project"],
        )
        # Workers log "worker started" once per subscription they consume.
        wanted = {"summary": 1, "extraction": 2, "compaction": 1}
        if not wait_until(
            lambda: all(
                read_text(self.log_dir / f"{k}.log").count('"worker started"') >= n
                for k, n in wanted.items()
            ),
            time.monotonic() + 60,
        ):
            raise StackError("the workers did not start within 60 s")
        if not wait_until(self.ready, time.monotonic() + 30):
            raise StackError("the API's /readyz did not answer 200 within 30 s")

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def api_url(self) -> str:
        return self.endpoints["api_url"]

    def environment(self) -> dict[str, str]:
        """What another `agent-memory` command needs to reach this stack."""
        env = {k: v for k, v in os.environ.items() if k not in STACK_VARIABLES}
        env.update(
            AM_DATABASE_URL=self.endpoints["database_url"],
            AM_VALKEY_URL=self.endpoints["valkey_url"],
            PUBSUB_EMULATOR_HOST=self.endpoints["pubsub_emulator_host"],
            GOOGLE_CLOUD_PROJECT=self.endpoints["google_cloud_project"],
        )
        return env

    # processes --------------------------------------------------------------------
    def pids(self) -> dict[str, tuple[int, float]]:
        """name -> (pid, create_time) from `<data-dir>/pids.json` (rewritten by `up`)."""
        for _ in range(5):  # `up` rewrites the file in place: a read can see half of it
            try:
                entries = json.loads((self.data_dir / "pids.json").read_text())
                break
            except FileNotFoundError:
                return {}
            except ValueError:
                time.sleep(0.05)
        else:
            return {}
        found = {e["name"]: (int(e["pid"]), float(e["create_time"])) for e in entries}
        self.known.update(found.values())
        return found

    def remember_descendants(self) -> None:
        for pid, _created in self.pids().values():
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(pid).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        self.members.add((child.pid, child.create_time()))

    def alive(self, name: str) -> bool:
        entry = self.pids().get(name)
        return entry is not None and process_alive(*entry)

    def ready(self) -> bool:
        return api_ready(self.api_url)

    def healthy(self) -> bool:
        """`up` runs, every process it reported lives, and the API is ready."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        pids = self.pids()
        if any(name not in pids for name in (*COMPONENTS, *SERVICES)):
            return False
        return all(process_alive(*entry) for entry in pids.values()) and self.ready()

    def answers(self, name: str) -> bool:
        """Does the component serve again?"""
        try:
            if name == "valkey":
                client = valkey.Valkey.from_url(self.endpoints["valkey_url"], socket_timeout=1)
                with contextlib.closing(client):
                    return bool(client.ping())
            if name == "postgres":
                with psycopg.connect(self.endpoints["database_url"], connect_timeout=2) as c:
                    return c.execute("SELECT 1").fetchone() is not None
            if name == "pubsub-emulator":
                return port_is_open(int(self.endpoints["pubsub_emulator_host"].rsplit(":")[1]))
        except (valkey.ValkeyError, psycopg.Error, OSError):
            return False
        return True

    def summary_handled(self) -> dict[str, float]:
        """event_id -> when the summary worker first concluded it (acked, or a
        duplicate of the API's own append), from its log. The API buffers each turn
        before answering, so the buffer alone cannot show that the worker runs."""
        found: dict[str, float] = {}
        # summary.log, and the logs of replicas a scenario started (summary-*.log).
        for path in sorted(self.log_dir.glob("summary*.log")):
            if path.name not in self._summary_logs:
                self._summary_logs[path.name] = AppliedLog(path)
            for event_id, at in self._summary_logs[path.name].poll().items():
                found[event_id] = min(at, found.get(event_id, at))
        return found

    # clients ----------------------------------------------------------------------
    def client(self) -> MemoryClient:
        # Longer than the API's publish timeout (10 s), so a 503 arrives as a 503.
        return MemoryClient(self.api_url, api_key=self.api_key, timeout=15.0)

    @property
    def valkey(self) -> valkey.Valkey:
        if self._valkey is None:
            self._valkey = valkey.Valkey.from_url(
                self.endpoints["valkey_url"], socket_timeout=3, socket_connect_timeout=2
            )
        return self._valkey

    def postgres(self) -> psycopg.Connection:
        # A fresh connection per check: one broken by a fault is not reused.
        return psycopg.connect(self.endpoints["database_url"], connect_timeout=3, autocommit=True)

    @property
    def queues(self) -> DeadLetterQueues:
        assert self.settings is not None
        if self._queues is None:
            self._queues = DeadLetterQueues(self.settings)
        return self._queues

    @property
    def publisher(self) -> EventPublisher:
        assert self.settings is not None
        if self._publisher is None:
            self._publisher = EventPublisher(self.settings)
        return self._publisher

    # stop -------------------------------------------------------------------------
    def stop(self) -> list[str]:
        """Stop `up` (it stops its children), then kill whatever is left of every
        process it ever reported. Returns what had to be killed by the harness."""
        for pause in self.paused:
            pause.resume()
        self.paused.clear()
        for cleanup in self.cleanups:
            cleanup()
        self.cleanups.clear()
        if self._publisher is not None:
            with contextlib.suppress(Exception):
                self._publisher.stop()
        if self._valkey is not None:
            with contextlib.suppress(Exception):
                self._valkey.close()
        self.remember_descendants()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STACK_STOP_BUDGET)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        killed = kill_leftovers(self.known, self.members)
        if not self.pg_disk_unmounted:
            unmount(self.pg_disk)
        return killed

    def metrics_url(self, service: str) -> str:
        """The service's metrics server (its `/readyz` too), as `up` printed it."""
        for line in read_text(self.up_log).splitlines():
            parts = line.split()
            if parts[:1] == [service] and "metrics" in parts:
                return parts[parts.index("metrics") + 1].removesuffix("/metrics")
        raise StackError(f"up printed no metrics address for {service}")

    def log_offsets(self) -> dict[str, int]:
        """The size of each process's log now: what a scenario reads from."""
        return {path.name: path.stat().st_size for path in self.log_dir.glob("*.log")}

    def log_tails(self, lines: int = 12) -> str:
        parts = [f"--- {self.up_log.name}\n{tail(self.up_log, lines)}"]
        for path in sorted(self.log_dir.glob("*.log")):
            parts.append(f"--- {path.name}\n{tail(path, lines)}")
        return "\n".join(parts)


def agent_memory() -> list[str]:
    """The `agent-memory` command of this interpreter's environment."""
    script = Path(sys.executable).parent / "agent-memory"
    return [str(script)] if script.exists() else [sys.executable, "-m", "services.cli"]


def api_ready(url: str) -> bool:
    """Does the API at `url` answer its `/readyz` with 200?"""
    try:
        return httpx.get(f"{url}/readyz", timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


def process_alive(pid: int, create_time: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - create_time) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_leftovers(leaders: set[tuple[int, float]], members: set[tuple[int, float]]) -> list[str]:
    """SIGKILL every live member of the process groups `up` led (each child of `up`
    leads its own group), also when the leader is gone, and every descendant seen.
    A group member is recognised by its group id and by being younger than the
    leader, any other process by its create time, so a reused pid is spared."""
    killed = []
    for proc in psutil.process_iter(["pid", "name", "create_time"]):
        try:
            created = proc.info["create_time"]
            pgid = os.getpgid(proc.pid)
            ours = any(pgid == pid and created >= born - 1 for pid, born in leaders) or any(
                proc.pid == pid and abs(created - born) < 1 for pid, born in members
            )
            if ours:
                proc.kill()
                killed.append(f"{proc.info['name']} ({proc.pid})")
        except (psutil.Error, ProcessLookupError):
            continue
    return killed


def read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def tail(path: Path, lines: int, width: int = 300) -> str:
    picked = read_text(path).splitlines()[-lines:]
    return "\n".join(line if len(line) <= width else line[:width] + " …" for line in picked)
