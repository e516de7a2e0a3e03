"""Helpers for tests: polling with a deadline, worker processes, the API over HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from shared.config import Settings, env_name
from shared.waiting import poll

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[1]


def wait_for(condition: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll `condition` until it returns a truthy value (the project's one polling loop)."""
    return poll(condition, timeout, what, interval)


def stays(condition: Callable[[], object], seconds: float, what: str) -> None:
    """Assert `condition` holds for the whole of `seconds` (checking that something
    does NOT happen, such as a retry of a dead-lettered message, takes a window)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert condition(), f"{what} stopped holding"
        # The observation window of an absence check, not a wait for a condition.
        time.sleep(0.2)  # noqa: sleep-ok


def settings_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment a child `agent-memory` process needs to use `settings`."""
    env = dict(os.environ)
    for name, value in settings.model_dump().items():
        if value is not None:
            env[env_name(name)] = str(value)
    env["AM_LOG_FORMAT"] = "json"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_cli(settings: Settings, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `agent-memory ARGS` as a user would, against the test's settings."""
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        env=settings_env(settings),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class WorkerProcess:
    """`agent-memory worker KIND` as a child process, its log in a file."""

    def __init__(self, settings: Settings, kind: str, log_path: Path, **env: str) -> None:
        self.kind = kind
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "worker", kind],
            env=settings_env(settings, **env),
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_records(self) -> list[dict]:
        """The JSON lines of the log (other lines, e.g. a Java stack, are skipped)."""
        records = []
        for line in self.log_text().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    records.append(json.loads(line))
        return records

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@contextmanager
def serve_api(settings: Settings, app: object | None = None) -> Iterator[str]:
    """The real API over real HTTP: uvicorn in a thread on a free port; its URL.
    `app`: one built by `create_app(settings)` that the test added to."""
    import httpx
    import uvicorn

    from services.api.app import create_app
    from services.dev.localstack.process import free_port

    port = free_port()
    config = uvicorn.Config(
        app or create_app(settings),
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        ws="none",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="api", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"

    def answering() -> bool:
        assert thread.is_alive(), "the API stopped while starting (see its log)"
        return server.started and httpx.get(f"{url}/healthz", timeout=2).status_code == 200

    try:
        wait_for(answering, 60, "the API's /healthz")
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
