"""The stack's own processes: the API and the replicas of each worker kind, each a
child started with the stack's endpoints in its environment and a metrics port of
its own (`LocalStack` runs them; the components are in their own modules)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from services.dev.localstack.components import StackError
from services.dev.localstack.endpoints import Endpoints
from services.dev.localstack.process import ManagedProcess
from services.dev.localstack.supervision import (
    ProcessExited,
    replica_name,
    service_kind,
    stop_group,
    wait_answering,
)
from shared.config import Settings

STOP_SERVICES_SECONDS = 5.5
SERVICE_SHUTDOWN_SECONDS = 5.0  # what a worker child gets to drain, inside STOP_SERVICES_SECONDS


class ServiceProcesses:
    """The part of `LocalStack` that starts, counts and stops its services."""

    settings: Settings
    endpoints: Endpoints | None
    scale: Mapping[str, int]
    log_dir: Path
    service_procs: dict[str, ManagedProcess]
    metrics_ports: dict[str, int]

    def _free_port(self) -> int:
        raise NotImplementedError

    def _write_pids(self) -> None:
        raise NotImplementedError

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
        stop_group(procs, timeout)
        self._write_pids()

    def start_service(self, name: str) -> None:
        """Start (or start again) one service process, its metrics on a port of its own."""
        env = self.child_environment()
        if name not in self.metrics_ports:
            self.metrics_ports[name] = self._free_port()
        port = self.metrics_ports[name]
        env["AM_METRICS_PORT"], env["AM_METRICS_HOST"] = str(port), "127.0.0.1"
        env["AM_REPLICA_NAME"] = name  # the figures' name of the replica
        proc = ManagedProcess(name, self._service_argv(name), self.log_dir / f"{name}.log", env=env)
        proc.start()
        self.service_procs[name] = proc
        self._write_pids()

    def _wait_api(self, timeout: float = 60.0) -> None:
        assert self.endpoints is not None
        health = f"{self.endpoints.api_url}/healthz"
        try:
            wait_answering(self.service_procs["api"], "the API", health, timeout)
        except (ProcessExited, TimeoutError) as exc:
            raise StackError(str(exc)) from None
