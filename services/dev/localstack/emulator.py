"""The Cloud SDK's Pub/Sub emulator, found on the machine."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import structlog

from services.dev.localstack.components import STARTUP_TIMEOUT_SECONDS, ComponentError, wait_ready
from services.dev.localstack.process import ManagedProcess, port_is_open

log = structlog.get_logger("agent_memory.up")

EMULATOR_RELATIVE = Path("platform/pubsub-emulator/bin/cloud-pubsub-emulator")

INSTALL_HINT = (
    "the Pub/Sub emulator was not found. Install it with the Google Cloud SDK "
    "(`gcloud components install pubsub-emulator`, or on Debian/Ubuntu "
    "`apt-get install google-cloud-cli-pubsub-emulator`; it needs Java 17), or set "
    "AM_PUBSUB_EMULATOR_BIN to its cloud-pubsub-emulator script, or point "
    "PUBSUB_EMULATOR_HOST at an emulator that is already running"
)


def sdk_roots() -> list[Path]:
    """Where a Google Cloud SDK may be installed, most specific first."""
    roots: list[Path] = []
    if os.environ.get("CLOUDSDK_ROOT_DIR"):
        roots.append(Path(os.environ["CLOUDSDK_ROOT_DIR"]))
    gcloud = shutil.which("gcloud")
    if gcloud:
        roots.append(Path(gcloud).resolve().parent.parent)
    return [
        *roots,
        Path("/usr/lib/google-cloud-sdk"),
        Path("/usr/share/google-cloud-sdk"),
        Path("/opt/google-cloud-sdk"),
        Path.home() / "google-cloud-sdk",
    ]


def find_emulator(configured: Path | None, roots: list[Path] | None = None) -> Path:
    """The emulator script: AM_PUBSUB_EMULATOR_BIN, else the Google Cloud SDK's copy."""
    if configured is not None:
        if configured.is_file() and os.access(configured, os.X_OK):
            return configured
        raise ComponentError(f"AM_PUBSUB_EMULATOR_BIN={configured} is not an executable file")
    for root in sdk_roots() if roots is None else roots:
        candidate = root / EMULATOR_RELATIVE
        if candidate.is_file():
            return candidate
    raise ComponentError(INSTALL_HINT)


# The emulator's JVM: the C1 compiler only, and the serial collector. With the JVM's
# defaults the emulator spent most of its CPU compiling, more than the API on a small
# machine, and drained no faster (docs/performance.md, "Tuning of the local stack").
# The SDK's script reads JAVA_OPTS; the user's JAVA_OPTS and
# CLOUD_PUBSUB_EMULATOR_OPTS come after these, so they win.
EMULATOR_JVM_OPTS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
# A JVM given two collectors refuses to start: the user's choice replaces ours.
_COLLECTOR = re.compile(r"-XX:\+Use\w*GC\b")


def _java_opts(users: str, emulator_opts: str = "") -> str:
    """JAVA_OPTS for the emulator: ours, then the user's JAVA_OPTS (`users`). The
    script adds CLOUD_PUBSUB_EMULATOR_OPTS (`emulator_opts`) after both."""
    chosen = _COLLECTOR.search(f"{users} {emulator_opts}")
    ours = [o for o in EMULATOR_JVM_OPTS if not (chosen and _COLLECTOR.fullmatch(o))]
    return " ".join([*ours, users]).strip()


def _log_since(path: Path, offset: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


class LocalPubSubEmulator:
    """The Google Cloud SDK's Pub/Sub emulator (in memory; topology re-applied at start)."""

    title = "Pub/Sub emulator"

    def __init__(self, binary: Path, port: int, log_dir: Path) -> None:
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise ComponentError("the Pub/Sub emulator needs Java 17 (`java` is not on PATH)")
        self.port = port
        self.process = ManagedProcess(
            "pubsub-emulator",
            [str(binary), "--host=127.0.0.1", f"--port={port}"],
            log_dir / "pubsub-emulator.log",
            env={
                **os.environ,
                "JAVA_OPTS": _java_opts(
                    os.environ.get("JAVA_OPTS", ""),
                    os.environ.get("CLOUD_PUBSUB_EMULATOR_OPTS", ""),
                ),
            },
        )

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> str:
        # Only what this run writes: a restart appends to the same log.
        log_path = self.process.log_path
        offset = log_path.stat().st_size if log_path.exists() else 0
        self.process.start()

        def ready() -> bool:
            return port_is_open(self.port) and "Server started" in _log_since(log_path, offset)

        wait_ready(ready, self.process, "the Pub/Sub emulator", STARTUP_TIMEOUT_SECONDS)
        return self.host
