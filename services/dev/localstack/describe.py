"""What `agent-memory up` prints once everything answers."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from services.dev.localstack.endpoints import Endpoints
from services.dev.localstack.process import ManagedProcess
from services.dev.localstack.state import DEV_KEY_FILE
from shared.config import Settings


class Described(Protocol):
    """What the lines tell of a running stack (`stack.LocalStack`)."""

    endpoints: Endpoints | None
    services: tuple[str, ...]
    data_dir: Path
    log_dir: Path
    service_procs: dict[str, ManagedProcess]
    metrics_ports: dict[str, int]
    dev_api_key: str | None
    settings: Settings

    def replicas(self, kind: str) -> int: ...


def describe(stack: Described) -> str:
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
