"""`agent-memory up`: the whole stack as child processes of one supervisor.

Start order: PostgreSQL, Valkey, the Pub/Sub emulator (each unless given by
URL), migrations, the topology, then the API and the workers. The endpoints
go to `<data-dir>/endpoints.json`. Stop order is the reverse, within 10 s:
the services first (they drain), then the components; anything still alive at
its deadline is killed with its whole process group.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import IO

import psycopg
import structlog

from services.dev.localstack.components import ComponentError, StackError
from services.dev.localstack.describe import describe
from services.dev.localstack.emulator import LocalPubSubEmulator, find_emulator
from services.dev.localstack.endpoints import Endpoints
from services.dev.localstack.postgres import LocalPostgres
from services.dev.localstack.process import ManagedProcess, free_port, port_is_open, tail
from services.dev.localstack.pubsub import apply_topology
from services.dev.localstack.service_processes import STOP_SERVICES_SECONDS, ServiceProcesses
from services.dev.localstack.state import (
    DEV_KEY_FILE,
    LockHeld,
    acquire_lock,
    ensure_dev_key,
    kill_orphans,
    release_lock,
    remove_pids,
    write_endpoints,
    write_pids,
)
from services.dev.localstack.supervision import (
    COMPONENT_BACKOFF_SECONDS,
    RestartBackoff,
    restart_component,
    stop_group,
)
from services.dev.localstack.valkey_server import LocalValkey
from shared.config import Settings
from shared.db.migrate import MigrationError, migrate
from shared.scale import WORKER_KINDS, parse_scale

log = structlog.get_logger("agent_memory.up")

# What the stack starts again, with the same port and data, when its process exits.
Component = LocalPostgres | LocalValkey | LocalPubSubEmulator

SERVICES = ("api", *WORKER_KINDS)
# Within 10 s: services drain, components shut down, stragglers are killed. Worst
# case 5.5 + 0.5 + 2.5 + 0.5 = 9 s (a SIGKILLed process is gone at once).
STOP_COMPONENTS_SECONDS = 2.5


class AlreadyRunning(StackError):
    pass


class LocalStack(ServiceProcesses):
    """Starts, watches and stops the components and the services of one data dir."""

    def __init__(
        self,
        settings: Settings,
        data_dir: Path | None = None,
        services: tuple[str, ...] = SERVICES,
        fast: bool = False,
        any_api_port: bool = False,
        scale: Mapping[str, int] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        # Told one line per start-up step as it completes (`up` prints them): the
        # first start of PostgreSQL and the emulator takes seconds each.
        self.progress = progress
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
        self._backoff = RestartBackoff()
        self._component_backoff = RestartBackoff(COMPONENT_BACKOFF_SECONDS)
        self._stopping = threading.Event()
        self._stop_requested = threading.Event()
        self._running = False

    # -- start ---------------------------------------------------------------
    def start(self) -> Endpoints:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._lock_file = acquire_lock(self.data_dir)
        except LockHeld as held:
            raise AlreadyRunning(
                f"agent-memory up is already running for {self.data_dir} (pid {held.holder})"
            ) from None
        try:
            kill_orphans(self.data_dir)
            self.endpoints = self._start_components()
            self._prepare()
            with self._step() as done:
                for kind in self.services:
                    self.start_replicas(kind, self.replicas(kind))
                self._write_endpoints()
                if "api" in self.services:
                    self._wait_api()
                done(f"services started: {', '.join(self.service_procs)}")
        except BaseException:
            self.stop()
            raise
        return self.endpoints

    @contextmanager
    def _step(self) -> Iterator[Callable[[str], None]]:
        """Time one start-up step; the step names its outcome with `done(line)`."""
        started = time.monotonic()

        def done(line: str) -> None:
            if self.progress is not None:
                self.progress(f"{line} ({time.monotonic() - started:.1f} s)")

        yield done

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
        with self._step() as done:
            address = self._recorded(component.start, component.process)
            done(f"{component.title} ready on port {component.port}")
        return address

    def _prepare(self) -> None:
        assert self.endpoints is not None
        with self._step() as done:
            try:
                applied = migrate(self.endpoints.database_url, self.settings.embedding_dim)
            except psycopg.OperationalError as exc:
                raise StackError(f"cannot reach PostgreSQL: {exc}".strip()) from None
            except MigrationError as exc:
                raise StackError(str(exc)) from None
            log.debug("migrations applied", applied=applied)
            done(f"migrations: {len(applied)} applied" if applied else "migrations: up to date")
        self.dev_api_key = ensure_dev_key(
            self.endpoints.database_url, self.data_dir / DEV_KEY_FILE, self.settings.default_app
        )
        # The Pub/Sub client reads the emulator address from the environment.
        if self.endpoints.pubsub_emulator_host:
            os.environ["PUBSUB_EMULATOR_HOST"] = self.endpoints.pubsub_emulator_host
        with self._step() as done:
            changed = self._apply_topology()
            done(
                f"topology: {len(changed)} created or updated"
                if changed
                else "topology: up to date"
            )

    def _apply_topology(self) -> list[str]:
        assert self.endpoints is not None
        own = any(isinstance(c, LocalPubSubEmulator) for c in self._restartable.values())
        return apply_topology(self.settings, self.endpoints, own_emulator=own)

    def _recorded(self, start: Callable[[], str], proc: ManagedProcess) -> str:
        """Run a component's start with its pid recorded the moment the process exists,
        so a supervisor killed during start-up leaves nothing the next `up` cannot stop."""
        proc.on_start = lambda _proc: self._write_pids()
        return start()

    def _write_endpoints(self) -> None:
        assert self.endpoints is not None
        write_endpoints(self.data_dir, asdict(self.endpoints))

    def _write_pids(self) -> None:
        write_pids(self.data_dir, [*self.components, *self.service_procs.values()])

    # -- run -----------------------------------------------------------------
    def watch_once(self) -> None:
        """Start again, with backoff, a component or a service that exited."""
        for proc in list(self.components):
            if self._component_backoff.due(proc.name, proc, self._stopping.is_set()):
                self._restart_component(proc)
        for name, proc in list(self.service_procs.items()):
            if not self._backoff.due(name, proc, self._stopping.is_set()):
                continue
            log.error(
                "service exited; restarting",
                service=name,
                exit_code=proc.exit_code(),
                restarts=self._backoff.restarts[name],
                log_tail=tail(proc.log_path, 5),
            )
            proc.close_log()
            self.start_service(name)

    def _restart_component(self, proc: ManagedProcess) -> None:
        component = self._restartable[proc.name]
        # A new emulator starts empty: a publish that reaches a topic before its
        # subscriptions exist is lost. The services wait, stopped, until it has them.
        emulator = isinstance(component, LocalPubSubEmulator)

        def started() -> None:
            self._write_pids()
            if emulator:
                self._apply_topology()

        restart_component(
            proc,
            component.start,
            self._component_backoff.restarts[proc.name],
            paused=[p for p in self.service_procs.values() if p.running] if emulator else [],
            started=started,
        )

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
        if self.progress is not None:
            self.progress("stopping: the services drain, then the components stop ...")
        with self._step() as done:
            self.stop()
            done("stopped")
        return 0

    # -- stop ----------------------------------------------------------------
    def stop(self) -> None:
        """Stop the services, then the components; kill what outlives its deadline."""
        self._stopping.set()
        stop_group(list(self.service_procs.values()), STOP_SERVICES_SECONDS)
        stop_group(list(reversed(self.components)), STOP_COMPONENTS_SECONDS)
        remove_pids(self.data_dir)
        if self._lock_file is not None:
            release_lock(self._lock_file)
            self._lock_file = None


__all__ = ["AlreadyRunning", "ComponentError", "Endpoints", "LocalStack", "StackError", "describe"]
