"""An API process of a scenario's own beside the stack's, on the stack's stores and
Pub/Sub, with settings of the scenario's (`AM_PUBLISH_QUEUE_LIMIT` small, say):
`up` starts its API with the stack's settings, and a restart by `up` would keep them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from bench.chaos_suite.budgets import wait_until
from bench.chaos_suite.stack import Stack, agent_memory, api_ready, tail
from services.dev.localstack.process import free_port


class OwnApi:
    def __init__(self, stack: Stack, name: str, settings: dict[str, str]) -> None:
        self.stack, self.name, self.settings = stack, name, settings
        self.url = ""
        self.proc: subprocess.Popen | None = None

    @property
    def log(self) -> Path:
        return self.stack.log_dir / f"{self.name}.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, deadline: float) -> str:
        """Start it and wait until it is ready: "" or why not."""
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {
            **self.stack.environment(),
            "AM_API_HOST": "127.0.0.1",
            "AM_API_PORT": str(port),
            "AM_LOG_FORMAT": "json",
            **self.settings,
        }
        env.pop("AM_METRICS_PORT", None)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*agent_memory(), "api"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        self.stack.cleanups.append(self.stop)
        if wait_until(lambda: api_ready(self.url), deadline, 0.3):
            return ""
        return f"{self.name} not ready in time:\n{tail(self.log, 8)}"

    def stop(self) -> None:
        """SIGTERM (it drains), then SIGKILL after 15 s."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        self.proc = None
        with contextlib.suppress(ValueError):
            self.stack.cleanups.remove(self.stop)
