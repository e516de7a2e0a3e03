"""`agent-memory up`: the whole stack as child processes of one supervisor.

Start order: PostgreSQL, Valkey, the Pub/Sub emulator (each unless given by
URL), migrations, the topology, then the API and the workers. The endpoints
go to `<data-dir>/endpoints.json`. Stop order is the reverse, within 10 s:
the services first (they drain), then the components; anything still alive at
its deadline is killed with its whole process group.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import httpx
import psutil
import psycopg
import structlog

from shared.api_keys import LOOKUP_SQL, create_key, key_hash
from shared.bus.admin import TopologyAdmin
from shared.config import Settings, parse_scale
from shared.db.migrate import MigrationError, migrate
from shared.localstack.components import (
    Component,
    ComponentError,
    LocalPostgres,
    LocalPubSubEmulator,
    LocalValkey,
    find_emulator,
)
from shared.localstack.process import ManagedProcess, free_port, port_is_open, tail
from shared.waiting import poll

log = structlog.get_logger("agent_memory.up")

SERVICES = ("api", "summary", "extraction", "compaction")
# Within 10 s: services drain, components shut down, stragglers are killed. Worst
# case 5.5 + 0.5 + 2.5 + 0.5 = 9 s (a SIGKILLed process is gone at once).
STOP_SERVICES_SECONDS = 5.5
STOP_COMPONENTS_SECONDS = 2.5
KILL_WAIT_SECONDS = 0.5
HEALTHY_AFTER_SECONDS = 60.0
SERVICE_SHUTDOWN_SECONDS = 5.0  # what a worker child gets to drain, inside STOP_SERVICES_SECONDS


class StackError(RuntimeError):
    pass


class AlreadyRunning(StackError):
    pass


@dataclass(frozen=True)
class Endpoints:
    api_url: str
    database_url: str
    valkey_url: str
    pubsub_emulator_host: str
    google_cloud_project: str

    def environment(self) -> dict[str, str]:
        """The variables another `agent-memory` command needs to reach this stack."""
        env = {
            "AM_DATABASE_URL": self.database_url,
            "AM_VALKEY_URL": self.valkey_url,
            "GOOGLE_CLOUD_PROJECT": self.google_cloud_project,
        }
        if self.pubsub_emulator_host:
            env["PUBSUB_EMULATOR_HOST"] = self.pubsub_emulator_host
        return env


class LocalStack:
    """Starts, watches and stops the components and the services of one data dir."""

    def __init__(
        self,
        settings: Settings,
        data_dir: Path | None = None,
        services: tuple[str, ...] = SERVICES,
        fast: bool = False,
        any_api_port: bool = False,
        scale: Mapping[str, int] | None = None,
    ) -> None:
        self.settings = settings
        # Replicas per worker kind: AM_SCALE, then `scale` (`up --scale`) per kind.
        self.scale = {**parse_scale(settings.scale), **(scale or {})}
        # Choose the API's port once the components listen (instead of
        # `settings.api_port`): the emulator's JVM also listens on a port the kernel
        # picks, which can be a port chosen free before it started.
        self.any_api_port = any_api_port
        self.data_dir = (data_dir or settings.data_dir).resolve()
        self.services = services
        self.fast = fast
        self.log_dir = self.data_dir / "logs"
        self.components: list[ManagedProcess] = []
        # process name -> the component that starts it again (same port and data)
        self._restartable: dict[str, Component] = {}
        # process name (`extraction`, `extraction-2`, ...) -> its process
        self.service_procs: dict[str, ManagedProcess] = {}
        self.endpoints: Endpoints | None = None
        self.dev_api_key: str | None = None
        self.metrics_ports: dict[str, int] = {}  # service -> its Prometheus port
        self._chosen_ports: set[int] = set()
        self._lock_file: IO[str] | None = None
        self._restarts: dict[str, int] = {}
        self._stopping = threading.Event()
        self._stop_requested = threading.Event()
        self._running = False

    # -- start ---------------------------------------------------------------
    def start(self) -> Endpoints:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        try:
            self._kill_orphans()
            self.endpoints = self._start_components()
            self._prepare()
            for kind in self.services:
                self.start_replicas(kind, self.replicas(kind))
            self._write_endpoints()
            if "api" in self.services:
                self._wait_api()
        except BaseException:
            self.stop()
            raise
        return self.endpoints

    def _acquire_lock(self) -> None:
        path = self.data_dir / "up.lock"
        self._lock_file = open(path, "a+")  # noqa: SIM115 - held until stop()
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.seek(0)
            holder = self._lock_file.read().strip() or "?"
            self._lock_file.close()
            self._lock_file = None
            raise AlreadyRunning(
                f"agent-memory up is already running for {self.data_dir} (pid {holder})"
            ) from None
        self._lock_file.seek(0)
        self._lock_file.truncate()
        self._lock_file.write(str(os.getpid()))
        self._lock_file.flush()

    def _kill_orphans(self) -> None:
        """Stop processes a previous supervisor left behind when it was killed."""
        state = self.data_dir / "pids.json"
        if not state.exists():
            return
        killed: list[psutil.Process] = []
        with contextlib.suppress(ValueError, OSError):
            for entry in json.loads(state.read_text()):
                with contextlib.suppress(psutil.Error):
                    proc = psutil.Process(entry["pid"])
                    if abs(proc.create_time() - entry["create_time"]) < 1.0:
                        log.warning("stopping a process left by an earlier run", name=entry["name"])
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.killpg(entry["pid"], signal.SIGKILL)
                        killed.append(proc)
        psutil.wait_procs(killed, timeout=5)
        state.unlink(missing_ok=True)

    def _port(self, configured: int | None) -> int:
        return configured or self._free_port()

    def _free_port(self) -> int:
        """A free port that is not the API's and not one this stack chose before:
        `free_port` only finds a port nothing listens on now, so without this a
        component could be given the API's port before the API binds it."""
        taken = {self.settings.api_port, *self._chosen_ports}
        port = free_port()
        while port in taken:
            port = free_port()
        self._chosen_ports.add(port)
        return port

    def _start_components(self) -> Endpoints:
        s = self.settings
        database_url = s.database_url
        if not database_url:
            postgres = LocalPostgres(
                self.data_dir,
                self._port(s.postgres_port),
                self.log_dir,
                fast=self.fast,
                shared_buffers=s.postgres_shared_buffers,
            )
            database_url = self._start_component(postgres)
        valkey_url = s.valkey_url
        if not valkey_url:
            valkey = LocalValkey(
                self.data_dir, self._port(s.valkey_port), self.log_dir, fast=self.fast
            )
            valkey_url = self._start_component(valkey)
        emulator_host = s.pubsub_emulator_host or ""
        if not emulator_host and s.pubsub_backend == "emulator":
            emulator = LocalPubSubEmulator(
                find_emulator(s.pubsub_emulator_bin), self._port(s.pubsub_port), self.log_dir
            )
            emulator_host = self._start_component(emulator)
        if "api" in self.services and self.any_api_port:
            self.settings = s = s.model_copy(update={"api_port": self._free_port()})
        if "api" in self.services and port_is_open(s.api_port, s.api_host):
            raise StackError(
                f"port {s.api_port} is in use; set AM_API_PORT to a free port for this stack"
            )
        return Endpoints(
            api_url=f"http://{s.api_host}:{s.api_port}",
            database_url=database_url,
            valkey_url=valkey_url,
            pubsub_emulator_host=emulator_host,
            google_cloud_project=s.google_cloud_project,
        )

    def _start_component(self, component: Component) -> str:
        self.components.append(component.process)
        self._restartable[component.process.name] = component
        return self._recorded(component.start, component.process)

    def _prepare(self) -> None:
        assert self.endpoints is not None
        try:
            applied = migrate(self.endpoints.database_url, self.settings.embedding_dim)
        except psycopg.OperationalError as exc:
            raise StackError(f"cannot reach PostgreSQL: {exc}".strip()) from None
        except MigrationError as exc:
            raise StackError(str(exc)) from None
        log.info("migrations applied", applied=applied)
        self.dev_api_key = ensure_dev_key(
            self.endpoints.database_url, self.data_dir / DEV_KEY_FILE, self.settings.default_app
        )
        # The Pub/Sub client reads the emulator address from the environment.
        if self.endpoints.pubsub_emulator_host:
            os.environ["PUBSUB_EMULATOR_HOST"] = self.endpoints.pubsub_emulator_host
        self._apply_topology()

    def _apply_topology(self) -> None:
        assert self.endpoints is not None
        settings = self.settings.model_copy(
            update={"pubsub_emulator_host": self.endpoints.pubsub_emulator_host or None}
        )
        states = TopologyAdmin(settings).apply()
        changed = [
            f"{st.kind} {st.name.rsplit('/', 1)[1]}: {st.status}"
            for st in states
            if st.status != "ok"
        ]
        log.info("topology applied", changed=changed)

    def child_environment(self) -> dict[str, str]:
        assert self.endpoints is not None
        env = dict(os.environ)
        env.update(self.endpoints.environment())
        env["AM_API_PORT"] = str(self.settings.api_port)
        env["AM_API_HOST"] = self.settings.api_host
        env["AM_LOG_FORMAT"] = "json"
        env["AM_WORKER_SHUTDOWN_SECONDS"] = str(
            min(self.settings.worker_shutdown_seconds, SERVICE_SHUTDOWN_SECONDS)
        )
        if self.settings.worker_concurrency:
            env["AM_WORKER_CONCURRENCY"] = str(self.settings.worker_concurrency)
        return env

    def _service_argv(self, name: str) -> list[str]:
        kind = service_kind(name)
        command = ["api"] if kind == "api" else ["worker", kind]
        return [sys.executable, "-m", "services.cli", *command]

    def replicas(self, kind: str) -> int:
        """How many processes of `kind` this stack runs (the API: one)."""
        return 1 if kind == "api" else self.scale.get(kind, 1)

    def start_replicas(self, kind: str, count: int) -> list[str]:
        """Start the replicas of `kind` up to `count` that are not running; their
        process names (`kind`, `kind-2`, ...), all on the same subscriptions."""
        names = [replica_name(kind, n) for n in range(1, count + 1)]
        for name in names:
            proc = self.service_procs.get(name)
            if proc is None or not proc.running:
                self.start_service(name)
        return names

    def stop_services(self, names: list[str], timeout: float = STOP_SERVICES_SECONDS) -> None:
        """Stop these service processes (they drain) and forget them."""
        procs = [self.service_procs.pop(name) for name in names if name in self.service_procs]
        self._stop_group(procs, timeout)
        self._write_pids()

    def start_service(self, name: str) -> None:
        """Start (or start again) one service process, its metrics on a port of its own."""
        env = self.child_environment()
        if name not in self.metrics_ports:
            self.metrics_ports[name] = self._free_port()
        port = self.metrics_ports[name]
        env["AM_METRICS_PORT"], env["AM_METRICS_HOST"] = str(port), "127.0.0.1"
        proc = ManagedProcess(name, self._service_argv(name), self.log_dir / f"{name}.log", env=env)
        proc.start()
        self.service_procs[name] = proc
        self._write_pids()

    def _wait_api(self, timeout: float = 60.0) -> None:
        assert self.endpoints is not None
        proc = self.service_procs["api"]
        health = f"{self.endpoints.api_url}/healthz"

        def answers() -> bool:
            if not proc.running:
                raise StackError(
                    f"the API exited with code {proc.exit_code()}; log {proc.log_path}:\n"
                    f"{tail(proc.log_path)}"
                )
            try:
                return httpx.get(health, timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            poll(answers, timeout, "the API to answer", interval=0.1)
        except TimeoutError as exc:
            raise StackError(str(exc)) from None

    def _recorded(self, start: Callable[[], str], proc: ManagedProcess) -> str:
        """Run a component's start with its pid recorded the moment the process exists,
        so a supervisor killed during start-up leaves nothing the next `up` cannot stop."""
        proc.on_start = lambda _proc: self._write_pids()
        return start()

    def _write_endpoints(self) -> None:
        assert self.endpoints is not None
        # It holds the Postgres URL with its password.
        write_private(
            self.data_dir / "endpoints.json", json.dumps(asdict(self.endpoints), indent=2) + "\n"
        )

    def _write_pids(self) -> None:
        entries = []
        for proc in [*self.components, *self.service_procs.values()]:
            with contextlib.suppress(psutil.Error):
                if proc.pid and proc.running:
                    entries.append(
                        {
                            "name": proc.name,
                            "pid": proc.pid,
                            "create_time": psutil.Process(proc.pid).create_time(),
                        }
                    )
        # Whole or not at all: a reader never sees half a file.
        partial = self.data_dir / "pids.json.tmp"
        partial.write_text(json.dumps(entries) + "\n")
        partial.replace(self.data_dir / "pids.json")

    # -- run -----------------------------------------------------------------
    def watch_once(self) -> None:
        """Start again, with backoff, a component or a service that exited."""
        for proc in list(self.components):
            if self._due_for_restart(proc.name, proc):
                self._restart_component(proc)
        for name, proc in list(self.service_procs.items()):
            if not self._due_for_restart(name, proc):
                continue
            log.error(
                "service exited; restarting",
                service=name,
                exit_code=proc.exit_code(),
                restarts=self._restarts[name],
                log_tail=tail(proc.log_path, 5),
            )
            proc.close_log()
            self.start_service(name)

    def _due_for_restart(self, name: str, proc: ManagedProcess) -> bool:
        """Exited, and its backoff (1, 2, 4 … 30 s after its last start) has passed;
        counts the restart. A process that ran a minute starts its backoff over."""
        if proc.running and time.monotonic() - proc.started_at > HEALTHY_AFTER_SECONDS:
            self._restarts[name] = 0
        if proc.running or self._stopping.is_set():
            return False
        count = self._restarts.get(name, 0)
        if time.monotonic() - proc.started_at < min(30.0, 2.0**count):
            return False
        self._restarts[name] = count + 1
        return True

    def _restart_component(self, proc: ManagedProcess) -> None:
        """The same component on the same port and data, after what is left of its
        process group. (PostgreSQL's backends each lead a session of their own; they
        exit once they notice the postmaster gone, and until then a new postmaster
        refuses their shared memory: the start fails and is tried again.)"""
        component = self._restartable[proc.name]
        log.error(
            "component exited; restarting it",
            component=proc.name,
            exit_code=proc.exit_code(),
            restarts=self._restarts[proc.name],
            log_tail=tail(proc.log_path, 5),
        )
        proc.send(signal.SIGKILL)
        proc.close_log()
        # A new emulator starts empty: a publish that reaches a topic before its
        # subscriptions exist is lost. The services wait, stopped, until it has them.
        emulator = isinstance(component, LocalPubSubEmulator)
        paused = self._pause_services() if emulator else []
        try:
            poll(lambda: not _alive(proc.group_pids()), 10, f"{proc.name}'s group to exit", 0.05)
            component.start()
            self._write_pids()
            if emulator:
                self._apply_topology()
        except Exception as exc:  # tried again at its next restart check
            log.error(
                "component did not start again; retrying", component=proc.name, error=str(exc)
            )
            proc.send(signal.SIGKILL)
            return
        finally:
            for service in paused:
                service.send(signal.SIGCONT)
        log.warning("component restarted", component=proc.name, pid=proc.pid)

    def _pause_services(self) -> list[ManagedProcess]:
        paused = [p for p in self.service_procs.values() if p.running]
        for service in paused:
            service.send(signal.SIGSTOP)
        return paused

    def install_signal_handlers(self) -> None:
        """SIGINT/SIGTERM: during start-up, unwind (start() stops what it started);
        afterwards, end `run_until_signal`; while stopping, ignored (stop is bounded)."""

        def on_signal(signum: int, _frame: object) -> None:
            if self._stopping.is_set():
                return
            if self._running:
                self._stop_requested.set()
            else:
                raise KeyboardInterrupt

        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, on_signal)

    def run_until_signal(self) -> int:
        """Block until SIGINT or SIGTERM, watching the children; then stop everything."""
        self._running = True
        while not self._stop_requested.wait(0.5):
            self.watch_once()
        self.stop()
        return 0

    # -- stop ----------------------------------------------------------------
    def stop(self) -> None:
        """Stop the services, then the components; kill what outlives its deadline."""
        self._stopping.set()
        self._stop_group(list(self.service_procs.values()), STOP_SERVICES_SECONDS)
        self._stop_group(list(reversed(self.components)), STOP_COMPONENTS_SECONDS)
        (self.data_dir / "pids.json").unlink(missing_ok=True)
        if self._lock_file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    @staticmethod
    def _stop_group(procs: list[ManagedProcess], timeout: float) -> None:
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


def replica_name(kind: str, number: int) -> str:
    """The process name of replica `number` (from 1) of a service kind: the first
    keeps the kind's own name (and log file), the others add their number."""
    return kind if number == 1 else f"{kind}-{number}"


def service_kind(name: str) -> str:
    kind, _, number = name.rpartition("-")
    return kind if kind and number.isdigit() else name


def _alive(pids: list[int]) -> list[int]:
    """`pids` but the zombies: they hold nothing, whoever reaps them."""
    alive = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
    return alive


DEV_KEY_FILE = "dev-api-key"


def ensure_dev_key(database_url: str, path: Path, app: str) -> str:
    """The local stack's development key (an admin key of `app`): the one in
    `path` while it is valid, else a new one written there (mode 600)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        if path.exists():
            key = path.read_text(encoding="utf-8").strip()
            row = conn.execute(LOOKUP_SQL, (key_hash(key),)).fetchone()
            if row is not None and row[0] == app:
                return key
        key, _record = create_key(conn, app, admin=True, name="local development (agent-memory up)")
    write_private(path, key + "\n")
    return key


def write_private(path: Path, text: str) -> None:
    """Write a file that holds a secret: readable by its owner only (mode 600)."""
    path.touch(mode=0o600)
    path.chmod(0o600)  # also when an older file was there
    path.write_text(text, encoding="utf-8")


def describe(stack: LocalStack) -> str:
    """The lines `up` prints once everything answers."""
    e = stack.endpoints
    assert e is not None
    workers = [kind for kind in stack.services if kind != "api"]
    lines = [
        f"agent-memory is up (data in {stack.data_dir})",
        f"  API       {e.api_url}" if "api" in stack.services else "",
        f"  Postgres  {e.database_url}",
        f"  Valkey    {e.valkey_url}",
        f"  Pub/Sub   {e.pubsub_emulator_host or 'Google Cloud'} "
        f"(project {e.google_cloud_project})",
        f"  logs      {stack.log_dir}",
        "  workers   " + ", ".join(f"{k} x{stack.replicas(k)}" for k in workers) if workers else "",
        *[
            f"    {name:<13} pid {proc.pid:<8} "
            f"metrics http://127.0.0.1:{stack.metrics_ports[name]}/metrics"
            for name, proc in stack.service_procs.items()
        ],
        f"  API key   {stack.dev_api_key} (app {stack.settings.default_app}; "
        f"also in {stack.data_dir / DEV_KEY_FILE})"
        if "api" in stack.services
        else "",
        "Reach this stack from another shell with:",
        *[f"  export {k}={v}" for k, v in e.environment().items()],
        "Ctrl-C stops everything.",
    ]
    return "\n".join(line for line in lines if line)


__all__ = ["AlreadyRunning", "ComponentError", "Endpoints", "LocalStack", "StackError", "describe"]
