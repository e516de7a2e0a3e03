"""The files `agent-memory up` keeps in its data dir: the lock that allows one
supervisor per data dir, the pids of its processes (so the next `up` can stop
what a killed supervisor left behind), and the files that hold a secret (the
endpoints, the development API key)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
from pathlib import Path
from typing import IO

import psutil
import psycopg
import structlog

from services.dev.localstack.process import ManagedProcess
from shared.api_keys import create_key, key_hash
from shared.db.api_keys import ApiKeys

log = structlog.get_logger("agent_memory.up")

LOCK_FILE = "up.lock"
PIDS_FILE = "pids.json"
ENDPOINTS_FILE = "endpoints.json"
DEV_KEY_FILE = "dev-api-key"  # the development API key (mode 600)


class LockHeld(Exception):
    """Another process holds the data dir's lock; `holder` is its pid, or `?`."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


def acquire_lock(data_dir: Path) -> IO[str]:
    """Hold `up.lock` of the data dir, with this process's pid in it, until
    `release_lock`; LockHeld if another process holds it."""
    lock_file = open(data_dir / LOCK_FILE, "a+")  # noqa: SIM115 - held until release_lock()
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock_file.seek(0)
        holder = lock_file.read().strip() or "?"
        lock_file.close()
        raise LockHeld(holder) from None
    lock_file.seek(0)
    lock_file.truncate()
    lock_file.write(str(os.getpid()))
    lock_file.flush()
    return lock_file


def release_lock(lock_file: IO[str]) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(lock_file, fcntl.LOCK_UN)
    lock_file.close()


def kill_orphans(data_dir: Path) -> None:
    """Stop processes a previous supervisor left behind when it was killed."""
    state = data_dir / PIDS_FILE
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


def write_pids(data_dir: Path, procs: list[ManagedProcess]) -> None:
    """Record the running processes: name, pid and start time (a pid alone may be
    reused by an unrelated process later)."""
    entries = []
    for proc in procs:
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
    partial = data_dir / "pids.json.tmp"
    partial.write_text(json.dumps(entries) + "\n")
    partial.replace(data_dir / PIDS_FILE)


def remove_pids(data_dir: Path) -> None:
    (data_dir / PIDS_FILE).unlink(missing_ok=True)


def write_private(path: Path, text: str) -> None:
    """Write a file that holds a secret: readable by its owner only (mode 600)."""
    path.touch(mode=0o600)
    path.chmod(0o600)  # also when an older file was there
    path.write_text(text, encoding="utf-8")


def write_endpoints(data_dir: Path, endpoints: dict[str, str]) -> None:
    # It holds the Postgres URL with its password.
    write_private(data_dir / ENDPOINTS_FILE, json.dumps(endpoints, indent=2) + "\n")


def ensure_dev_key(database_url: str, path: Path, app: str) -> str:
    """The local stack's development key (an admin key of `app`): the one in
    `path` while it is valid, else a new one written there (mode 600)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        if path.exists():
            key = path.read_text(encoding="utf-8").strip()
            found = ApiKeys(conn).lookup(key_hash(key))
            if found is not None and found[0] == app:
                return key
        key, _record = create_key(conn, app, admin=True, name="local development (agent-memory up)")
    write_private(path, key + "\n")
    return key
