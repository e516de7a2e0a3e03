"""Chaos suite: faults injected into a running `agent-memory up` while turns are recorded.

Starts `agent-memory up --data-dir <tmp>` as a subprocess (the real processes, in
durable mode, on a free AM_API_PORT), and runs each scenario on users of its own:
a burst of turns recorded through the HTTP API with the stack's development key
(the project's client; a 503 or a connection error is retried with the same
turn_id until the scenario's deadline), with a fault injected mid-burst. Then it
waits, polling with a deadline, until every accepted turn is applied, and checks
Valkey and Postgres directly: each turn exactly once in its session (the buffered
turns plus the turn ids folded into the summary) and exactly once in `episodes`.
The API buffers a turn itself before it answers, so the summary worker's log must
also show each event concluded (a stalled summary worker is otherwise invisible).
The dead-letter queues are read without consuming them.

Scenarios (`--only NAME`, repeatable or comma-separated; `--list` names them):

  summary-kill9, extraction-kill9, compaction-kill9   kill -9 of a worker
  summary-sigterm, extraction-sigterm, compaction-sigterm   SIGTERM of a worker
  valkey-kill9, valkey-sigstop                  Valkey killed; stopped for 20 s
  postgres-kill9, postgres-sigstop              the postmaster killed; its group stopped 20 s
  emulator-kill9                                the Pub/Sub emulator killed
  invalid-events                                invalid events published onto `turns`
  dlq-replay                                    `agent-memory dlq replay turns-summary`
                                                of valid and invalid dead letters

One table row per scenario; the process exits 1 unless every row passes (0 lost,
0 duplicated, 0 valid events dead-lettered, recovered within the deadline, and the
scenario's own checks). The stack is restarted between scenarios when one left
it broken, and always stopped at the end, also on Ctrl-C.

    .venv/bin/python bench/chaos.py [--only NAME] [--keep] [--turns 150] [--rate 50]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psutil
import psycopg
import valkey

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import AppliedLog  # noqa: E402
from shared.bus.dlq import DeadLetterQueues  # noqa: E402
from shared.bus.publisher import EventPublisher  # noqa: E402
from shared.bus.worker import (  # noqa: E402
    DEAD_LETTER_ATTEMPT,
    DEAD_LETTER_ORDERING_KEY,
    DEAD_LETTER_REASON,
    DEAD_LETTER_SUBSCRIPTION,
)
from shared.client import MemoryClient  # noqa: E402
from shared.client.errors import (  # noqa: E402
    MemoryApiError,
    MemoryClientError,
    MemoryConnectionError,
)
from shared.config import Settings, load_settings  # noqa: E402
from shared.events import TurnRecorded, derived_event_id, encode, format_time  # noqa: E402
from shared.localstack.process import free_port, port_is_open  # noqa: E402
from shared.logging import configure_logging  # noqa: E402
from shared.session_buffer import SessionBuffer, SessionKey  # noqa: E402

# Budgets, in seconds. Every wait of the harness has one, so a run always ends.
START_BUDGET = 120.0  # `agent-memory up` until everything answers
RESTART_BUDGET = 20.0  # `up` restarting a killed process
APPLY_BUDGET = 90.0  # from the fault's end until every accepted turn is applied
SEND_BUDGET = 60.0  # how long one turn is retried (503, connection errors)
STOP_SECONDS = 20.0  # SIGSTOP ... SIGCONT
REPLAY_BUDGET = 20.0  # `agent-memory dlq replay` must end within this
STACK_STOP_BUDGET = 20.0  # `up` stops within 10 s; then the harness kills what is left
POLL_SECONDS = 0.5
DLQ_CHECK_SECONDS = 5.0  # reading a dead-letter queue costs about 2 s of pulls

SERVICES = ("api", "summary", "extraction", "compaction")
COMPONENTS = ("postgres", "valkey", "pubsub-emulator")
# What `up` must not inherit, or it would use another stack's stores.
STACK_VARIABLES = ("AM_DATABASE_URL", "AM_VALKEY_URL", "PUBSUB_EMULATOR_HOST", "AM_API_PORT")
DLQS = ("turns-summary", "turns-extraction", "compaction-requests")

OLD_TURNS_PER_USER = 24  # compaction scenarios: episodes 60 days old per user
# Episodes per compaction request: a chain of 24 requests per user, so that the
# fault meets the chain under way (a fold takes tens of milliseconds).
COMPACTION_BATCH = 1
COMPACTION_RETENTION_DAYS = 30
COMPACTED_ENTITY = "compacted-episodes"


def say(text: str) -> None:
    print(text, flush=True)


# -- the stack ------------------------------------------------------------------------


class StackError(RuntimeError):
    pass


class Stack:
    """One `agent-memory up` subprocess and its data dir."""

    def __init__(self, root: Path, index: int) -> None:
        self.data_dir = root / f"stack-{index}"
        self.up_log = root / f"up-{index}.log"
        self.proc: subprocess.Popen | None = None
        self.endpoints: dict[str, str] = {}
        self.api_key = ""
        self.settings: Settings | None = None
        # Every (pid, create_time) `up` reported, and every descendant seen, so that
        # stop() can finish off what `up` leaves behind. PostgreSQL's children each
        # lead a session of their own: a kill of the postmaster's group misses them.
        self.known: set[tuple[int, float]] = set()
        self.members: set[tuple[int, float]] = set()
        self.paused: list[Pause] = []  # SIGSTOPped by us: SIGCONT before stopping
        self._valkey: valkey.Valkey | None = None
        self._queues: DeadLetterQueues | None = None
        self._publisher: EventPublisher | None = None
        self._summary_log: AppliedLog | None = None

    # start ------------------------------------------------------------------------
    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in STACK_VARIABLES}
        env["AM_API_PORT"] = str(free_port())
        self.data_dir.mkdir(parents=True)
        with open(self.up_log, "ab") as log:
            self.proc = subprocess.Popen(
                [*agent_memory(), "up", "--data-dir", str(self.data_dir)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                # Its own group: a Ctrl-C in the terminal reaches only the harness,
                # which then stops `up` itself.
                start_new_session=True,
            )
        deadline = time.monotonic() + START_BUDGET
        while "agent-memory is up" not in read_text(self.up_log):
            if self.proc.poll() is not None:
                raise StackError(f"agent-memory up exited:\n{tail(self.up_log, 20)}")
            if time.monotonic() > deadline:
                raise StackError(f"agent-memory up not up in {START_BUDGET:.0f} s")
            time.sleep(0.2)
        self.endpoints = json.loads((self.data_dir / "endpoints.json").read_text())
        self.api_key = (self.data_dir / "dev-api-key").read_text().strip()
        self.remember_descendants()
        # The harness's Pub/Sub clients read the emulator's address from here.
        os.environ["PUBSUB_EMULATOR_HOST"] = self.endpoints["pubsub_emulator_host"]
        self.settings = load_settings(
            database_url=self.endpoints["database_url"],
            valkey_url=self.endpoints["valkey_url"],
            pubsub_emulator_host=self.endpoints["pubsub_emulator_host"],
            google_cloud_project=self.endpoints["google_cloud_project"],
        )
        # Workers log "worker started" once per subscription they consume.
        wanted = {"summary": 1, "extraction": 2, "compaction": 1}
        if not wait_until(
            lambda: all(
                read_text(self.log_dir / f"{k}.log").count('"worker started"') >= n
                for k, n in wanted.items()
            ),
            time.monotonic() + 60,
        ):
            raise StackError("the workers did not start within 60 s")
        if not wait_until(self.ready, time.monotonic() + 30):
            raise StackError("the API's /readyz did not answer 200 within 30 s")

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def api_url(self) -> str:
        return self.endpoints["api_url"]

    def environment(self) -> dict[str, str]:
        """What another `agent-memory` command needs to reach this stack."""
        env = {k: v for k, v in os.environ.items() if k not in STACK_VARIABLES}
        env.update(
            AM_DATABASE_URL=self.endpoints["database_url"],
            AM_VALKEY_URL=self.endpoints["valkey_url"],
            PUBSUB_EMULATOR_HOST=self.endpoints["pubsub_emulator_host"],
            GOOGLE_CLOUD_PROJECT=self.endpoints["google_cloud_project"],
        )
        return env

    # processes --------------------------------------------------------------------
    def pids(self) -> dict[str, tuple[int, float]]:
        """name -> (pid, create_time) from `<data-dir>/pids.json` (rewritten by `up`)."""
        for _ in range(5):  # `up` rewrites the file in place: a read can see half of it
            try:
                entries = json.loads((self.data_dir / "pids.json").read_text())
                break
            except FileNotFoundError:
                return {}
            except ValueError:
                time.sleep(0.05)
        else:
            return {}
        found = {e["name"]: (int(e["pid"]), float(e["create_time"])) for e in entries}
        self.known.update(found.values())
        return found

    def remember_descendants(self) -> None:
        for pid, _created in self.pids().values():
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(pid).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        self.members.add((child.pid, child.create_time()))

    def alive(self, name: str) -> bool:
        entry = self.pids().get(name)
        return entry is not None and process_alive(*entry)

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.api_url}/readyz", timeout=3).status_code == 200
        except httpx.HTTPError:
            return False

    def healthy(self) -> bool:
        """`up` runs, every process it reported lives, and the API is ready."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        pids = self.pids()
        if any(name not in pids for name in (*COMPONENTS, *SERVICES)):
            return False
        return all(process_alive(*entry) for entry in pids.values()) and self.ready()

    def answers(self, name: str) -> bool:
        """Does the component serve again?"""
        try:
            if name == "valkey":
                client = valkey.Valkey.from_url(self.endpoints["valkey_url"], socket_timeout=1)
                with contextlib.closing(client):
                    return bool(client.ping())
            if name == "postgres":
                with psycopg.connect(self.endpoints["database_url"], connect_timeout=2) as c:
                    return c.execute("SELECT 1").fetchone() is not None
            if name == "pubsub-emulator":
                return port_is_open(int(self.endpoints["pubsub_emulator_host"].rsplit(":")[1]))
        except (valkey.ValkeyError, psycopg.Error, OSError):
            return False
        return True

    def summary_handled(self) -> dict[str, float]:
        """event_id -> when the summary worker first concluded it (acked, or a
        duplicate of the API's own append), from its log. The API buffers each turn
        before answering, so the buffer alone cannot show that the worker runs."""
        if self._summary_log is None:
            self._summary_log = AppliedLog(self.log_dir / "summary.log")
        return self._summary_log.poll()

    # clients ----------------------------------------------------------------------
    def client(self) -> MemoryClient:
        # Longer than the API's publish timeout (10 s), so a 503 arrives as a 503.
        return MemoryClient(self.api_url, api_key=self.api_key, timeout=15.0)

    @property
    def valkey(self) -> valkey.Valkey:
        if self._valkey is None:
            self._valkey = valkey.Valkey.from_url(
                self.endpoints["valkey_url"], socket_timeout=3, socket_connect_timeout=2
            )
        return self._valkey

    def postgres(self) -> psycopg.Connection:
        # A fresh connection per check: one broken by a fault is not reused.
        return psycopg.connect(self.endpoints["database_url"], connect_timeout=3, autocommit=True)

    @property
    def queues(self) -> DeadLetterQueues:
        assert self.settings is not None
        if self._queues is None:
            self._queues = DeadLetterQueues(self.settings)
        return self._queues

    @property
    def publisher(self) -> EventPublisher:
        assert self.settings is not None
        if self._publisher is None:
            self._publisher = EventPublisher(self.settings)
        return self._publisher

    def peek(self, subscriptions: Iterable[str] = DLQS) -> dict[str, Counter[str]] | None:
        """Event ids waiting in each dead-letter queue (read, handed back); None when
        the emulator does not answer (an empty read would look like an empty queue)."""
        if not self.answers("pubsub-emulator"):
            return None
        names = list(subscriptions)
        try:
            with ThreadPoolExecutor(len(names)) as pool:
                found = pool.map(lambda n: self.queues.peek(n), names)
                return {
                    name: Counter(letter.event_id or letter.message_id for letter in letters)
                    for name, letters in zip(names, found, strict=True)
                }
        except Exception as exc:  # the emulator went away during the read
            say(f"    (dead-letter queues not readable: {type(exc).__name__})")
            return None

    # stop -------------------------------------------------------------------------
    def stop(self) -> list[str]:
        """Stop `up` (it stops its children), then kill whatever is left of every
        process it ever reported. Returns what had to be killed by the harness."""
        for pause in self.paused:
            pause.resume()
        self.paused.clear()
        if self._publisher is not None:
            with contextlib.suppress(Exception):
                self._publisher.stop()
        if self._valkey is not None:
            with contextlib.suppress(Exception):
                self._valkey.close()
        self.remember_descendants()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STACK_STOP_BUDGET)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        return kill_leftovers(self.known, self.members)

    def log_tails(self, lines: int = 12) -> str:
        parts = [f"--- {self.up_log.name}\n{tail(self.up_log, lines)}"]
        for path in sorted(self.log_dir.glob("*.log")):
            parts.append(f"--- {path.name}\n{tail(path, lines)}")
        return "\n".join(parts)


def agent_memory() -> list[str]:
    """The `agent-memory` command of this interpreter's environment."""
    script = Path(sys.executable).parent / "agent-memory"
    return [str(script)] if script.exists() else [sys.executable, "-m", "services.cli"]


def process_alive(pid: int, create_time: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - create_time) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_leftovers(leaders: set[tuple[int, float]], members: set[tuple[int, float]]) -> list[str]:
    """SIGKILL every live member of the process groups `up` led (each child of `up`
    leads its own group), also when the leader is gone, and every descendant seen.
    A group member is recognised by its group id and by being younger than the
    leader, any other process by its create time, so a reused pid is spared."""
    killed = []
    for proc in psutil.process_iter(["pid", "name", "create_time"]):
        try:
            created = proc.info["create_time"]
            pgid = os.getpgid(proc.pid)
            ours = any(pgid == pid and created >= born - 1 for pid, born in leaders) or any(
                proc.pid == pid and abs(created - born) < 1 for pid, born in members
            )
            if ours:
                proc.kill()
                killed.append(f"{proc.info['name']} ({proc.pid})")
        except (psutil.Error, ProcessLookupError):
            continue
    return killed


def read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def tail(path: Path, lines: int, width: int = 300) -> str:
    picked = read_text(path).splitlines()[-lines:]
    return "\n".join(line if len(line) <= width else line[:width] + " …" for line in picked)


def wait_until(check: Callable[[], object], deadline: float, interval: float = 0.2) -> bool:
    """Poll `check` until it is truthy (True) or `deadline` (time.monotonic) passes (False)."""
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# -- turns and the burst ---------------------------------------------------------------


@dataclass
class Turn:
    app: str
    user_id: str
    session_id: str
    turn_id: str
    text: str
    created_at: str | None = None
    event_id: str = ""  # from the 202
    accepted_at: float | None = None  # time.monotonic() of the 202
    # When the attempt that got the 202 started: the event may have reached Pub/Sub
    # from then on.
    published_from: float | None = None
    attempts: int = 0
    failure: str = ""  # the last error; why it is not accepted, if it is not

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.user_id, self.session_id, self.turn_id)

    @property
    def expected_event_id(self) -> str:
        """The id the API gives this turn's event (also when no 202 came back)."""
        return derived_event_id(self.app, self.user_id, self.session_id, self.turn_id)


def make_turns(app: str, users: list[str], sessions: int, count: int, tag: str) -> list[Turn]:
    """`count` turns spread round-robin over every session of `users`."""
    keys = [(u, f"{u}-s{s}") for u in users for s in range(sessions)]
    turns = []
    for n in range(count):
        user, session = keys[n % len(keys)]
        turns.append(
            Turn(app, user, session, f"{tag}-{n:04d}", f"Turn {n} of the chaos burst: status?")
        )
    return turns


class Burst:
    """Records `turns` through the API at `rate` per second (open loop, `threads`
    senders taking them in order); each turn is retried on 503 and connection errors
    with its turn_id until SEND_BUDGET or stop()."""

    def __init__(self, stack: Stack, turns: list[Turn], rate: float, threads: int = 8) -> None:
        self.stack = stack
        self.turns = turns
        self.rate = rate
        self.threads = threads
        self._next = 0
        self._sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self.started = 0.0

    def start(self) -> Burst:
        self.started = time.monotonic()
        self._workers = [
            threading.Thread(target=self._run, daemon=True) for _ in range(self.threads)
        ]
        for worker in self._workers:
            worker.start()
        return self

    @property
    def sent(self) -> int:
        """Turns whose first attempt has started."""
        with self._lock:
            return self._sent

    def wait_sent(self, count: int, deadline: float) -> bool:
        return wait_until(lambda: self.sent >= count, deadline, interval=0.02)

    def stop(self) -> None:
        self._stop.set()

    def join(self, deadline: float) -> bool:
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        return not any(w.is_alive() for w in self._workers)

    def _run(self) -> None:
        with self.stack.client() as client:
            while not self._stop.is_set():
                with self._lock:
                    if self._next >= len(self.turns):
                        return
                    n = self._next
                    self._next += 1
                if self._stop.wait(max(0.0, self.started + n / self.rate - time.monotonic())):
                    return
                with self._lock:
                    self._sent += 1
                record(client, self.turns[n], time.monotonic() + SEND_BUDGET, self._stop)


def record(client: MemoryClient, turn: Turn, give_up_at: float, stop: threading.Event) -> None:
    """One turn, as an agent service records it: the client's own retries, and on a
    503 or no answer, again with the same turn_id until `give_up_at`."""
    delay = 0.2
    while True:
        turn.attempts += 1
        turn.failure = "no answer yet"  # what a tally taken during the attempt shows
        attempt_started = time.monotonic()
        try:
            answer = client.record_turn(
                turn.session_id,
                turn.user_id,
                turn.text,
                "Noted.",
                turn_id=turn.turn_id,
                created_at=turn.created_at,
            )
        except MemoryConnectionError as exc:
            turn.failure = f"no answer: {str(exc)[-120:]}"
        except MemoryApiError as exc:
            turn.failure = f"{exc.status} {exc.code}"
            if exc.status != 503:
                return  # an answer, not an outage: not retried
        except MemoryClientError as exc:
            turn.failure = f"{type(exc).__name__}: {str(exc)[:120]}"
            return
        else:
            turn.event_id, turn.failure = answer.event_id, ""
            turn.accepted_at, turn.published_from = time.monotonic(), attempt_started
            return
        if stop.is_set() or time.monotonic() + delay > give_up_at:
            return
        stop.wait(delay)
        delay = min(1.0, delay * 2)


# -- what the stores hold ----------------------------------------------------------------


@dataclass
class Observation:
    """How many times each turn is in its session (buffer or folded) and in the archive,
    and which events the summary worker concluded. None: that store could not be read."""

    buffer: dict[tuple[str, str, str], int] | None
    archive: dict[tuple[str, str, str], int] | None
    handled: set[str]
    problems: list[str] = field(default_factory=list)

    def readable(self, target: str) -> bool:
        return {"buffer": self.buffer, "archive": self.archive}.get(target, {}) is not None

    def count(self, target: str, turn: Turn) -> int:
        if target == "summary":
            return int(turn.expected_event_id in self.handled)
        found = self.buffer if target == "buffer" else self.archive
        return 0 if found is None else found.get(turn.key, 0)


def observe(stack: Stack, app: str, turns: Iterable[Turn]) -> Observation:
    turns = list(turns)
    sessions = sorted({(t.user_id, t.session_id) for t in turns})
    users = sorted({t.user_id for t in turns})
    problems = []
    buffer: dict[tuple[str, str, str], int] | None = Counter()
    try:
        reader = SessionBuffer(stack.valkey, 3600)  # reads only: no TTL is touched
        for user, session in sessions:
            view = reader.read(SessionKey(app, user, session), with_folds=True)
            placed = [t.turn_id for t in view.turns]
            placed += [turn_id for folded in view.folds.values() for turn_id in folded]
            for turn_id in placed:
                buffer[(user, session, turn_id)] += 1
    except valkey.ValkeyError as exc:
        buffer = None
        problems.append(f"Valkey not readable ({type(exc).__name__})")
    archive: dict[tuple[str, str, str], int] | None = Counter()
    try:
        with stack.postgres() as conn:
            rows = conn.execute(
                "SELECT user_id, session_id, turn_id, count(*) FROM episodes "
                "WHERE app = %s AND user_id = ANY(%s) GROUP BY 1, 2, 3",
                (app, users),
            ).fetchall()
        archive = Counter({(u, s, t): n for u, s, t, n in rows})
    except psycopg.Error as exc:
        archive = None
        problems.append(f"Postgres not readable ({type(exc).__name__})")
    return Observation(buffer, archive, set(stack.summary_handled()), problems)


# buffer: the turn is in its session once; archive: in `episodes` once; summary: the
# summary worker concluded its event.
TARGETS = ("buffer", "archive", "summary")
TARGET_DLQ = {"buffer": "turns-summary", "archive": "turns-extraction", "summary": "turns-summary"}


def missing(
    turns: Iterable[Turn], obs: Observation, targets: tuple[str, ...]
) -> list[tuple[Turn, str]]:
    return [(t, target) for t in turns for target in targets if obs.count(target, t) == 0]


def all_dead_lettered(pending: list[tuple[Turn, str]], dlq: dict[str, Counter[str]]) -> bool:
    return all(t.expected_event_id in dlq[TARGET_DLQ[target]] for t, target in pending)


@dataclass
class Settled:
    at: float | None  # time.monotonic() when every turn was applied; None if never
    why: str  # when not: why the wait ended
    obs: Observation


def settle(
    stack: Stack,
    app: str,
    turns: list[Turn],
    deadline: float,
    targets: tuple[str, ...] = TARGETS,
    also: Callable[[], bool] | None = None,
) -> Settled:
    """Poll until every turn is in every target (and `also()` holds), until `deadline`,
    or until every missing one is in a dead-letter queue (it will not come by itself)."""
    last_dlq = time.monotonic()
    while True:
        obs = observe(stack, app, turns)
        pending = missing(turns, obs, targets) if not obs.problems else [(t, "") for t in turns]
        if not pending and (also is None or also()):
            return Settled(time.monotonic(), "", obs)
        now = time.monotonic()
        if now >= deadline:
            what = "; ".join(obs.problems) or f"{len(pending)} (turn, store) pairs missing"
            return Settled(None, f"not applied by the deadline ({what})", obs)
        if pending and not obs.problems and now - last_dlq >= DLQ_CHECK_SECONDS:
            dlq = stack.peek(("turns-summary", "turns-extraction"))
            last_dlq = time.monotonic()
            if dlq is not None and all_dead_lettered(pending, dlq):
                return Settled(None, f"the {len(pending)} missing are dead-lettered", obs)
        time.sleep(POLL_SECONDS)


# -- the table ---------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    fault: str
    at: str = "-"
    sent: int = 0
    accepted: int = 0
    buffer_once: str = "-"
    archive_once: str = "-"
    summary_handled: str = "-"
    lost: int = 0
    duplicated: int = 0
    dlq_valid: int = 0
    dlq_invalid: str = "-"
    lost_with_emulator: str = "-"
    recovery: str = "-"
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    recovered: bool = True

    @property
    def ok(self) -> bool:
        return not self.failures

    def fail(self, reason: str) -> None:
        self.failures.append(reason)


COLUMNS = [
    ("scenario", "name"),
    ("fault", "fault"),
    ("injected at", "at"),
    ("sent", "sent"),
    ("accepted", "accepted"),
    ("buffer 1x", "buffer_once"),
    ("archive 1x", "archive_once"),
    ("summary worker", "summary_handled"),
    ("lost", "lost"),
    ("dup", "duplicated"),
    ("DLQ valid", "dlq_valid"),
    ("DLQ invalid", "dlq_invalid"),
    ("lost w/ emulator", "lost_with_emulator"),
    ("recovery", "recovery"),
    ("result", "result"),
]


def table(rows: list[Row]) -> str:
    cells = [
        [
            ("PASS" if row.ok else "FAIL") if attr == "result" else str(getattr(row, attr))
            for _title, attr in COLUMNS
        ]
        for row in rows
    ]
    titles = [title for title, _attr in COLUMNS]
    widths = [max(len(c) for c in column) for column in zip(titles, *cells, strict=True)]
    numeric = {"sent", "accepted", "lost", "duplicated", "dlq_valid"}

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if attr in numeric else v.ljust(w)
            for v, w, (_t, attr) in zip(values, widths, COLUMNS, strict=True)
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(titles), rule, *(line(c) for c in cells)])


def tally(
    row: Row,
    turns: list[Turn],
    obs: Observation,
    dlq: dict[str, Counter[str]] | None,
    targets: tuple[str, ...] = TARGETS,
    emulator_killed_at: float | None = None,
) -> None:
    """Fill the row's turn columns from the final observation and dead-letter queues.

    lost: accepted, and missing from a store that could be read without being in that
    store's dead-letter queue. A store that cannot be read is reported, not counted."""
    sent = [t for t in turns if t.attempts]
    accepted = [t for t in sent if t.event_id]
    row.sent, row.accepted = len(sent), len(accepted)
    for target, attr in (("buffer", "buffer_once"), ("archive", "archive_once")):
        if target in targets:
            once = sum(1 for t in accepted if obs.count(target, t) == 1)
            readable = obs.readable(target)
            setattr(row, attr, f"{once}/{len(accepted)}" if readable else "unreadable")
    if "summary" in targets:
        row.summary_handled = f"{sum(obs.count('summary', t) for t in accepted)}/{len(accepted)}"
    row.duplicated = sum(1 for t in accepted if any(obs.count(target, t) > 1 for target in targets))

    def dead(target: str, turn: Turn) -> bool:
        return bool(dlq and dlq[TARGET_DLQ[target]][turn.expected_event_id])

    row.dlq_valid = sum(1 for t in sent if any(dead(target, t) for target in targets))
    stores = [target for target in targets if target != "summary" and obs.readable(target)]
    lost = [
        t
        for t in accepted
        if any(obs.count(target, t) == 0 and not dead(target, t) for target in stores)
    ]
    unhandled = [t for t in accepted if obs.count("summary", t) == 0 and not dead("summary", t)]
    if emulator_killed_at is not None:
        # Its event may have been in the emulator when it died.
        with_emulator = [
            t for t in lost if t.published_from and t.published_from < emulator_killed_at
        ]
        row.lost_with_emulator = str(len(with_emulator))
        lost = [t for t in lost if t not in with_emulator]
        unhandled = [
            t for t in unhandled if not (t.published_from and t.published_from < emulator_killed_at)
        ]
    row.lost = len(lost)
    if dlq is None:
        row.notes.append("dead-letter queues not readable at the end (emulator down)")
    row.notes.extend(obs.problems)
    not_accepted = Counter(t.failure for t in sent if not t.event_id)
    if not_accepted:
        row.notes.append(
            f"{len(sent) - len(accepted)} never accepted: "
            + ", ".join(f"{n}× {why}" for why, n in not_accepted.most_common(3))
        )
        row.fail(f"{len(sent) - len(accepted)} turns never accepted")
    if row.lost:
        row.fail(f"{row.lost} lost")
    if "summary" in targets and unhandled:
        row.fail(f"{len(unhandled)} events never concluded by the summary worker")
    if row.duplicated:
        row.fail(f"{row.duplicated} duplicated")
    if row.dlq_valid:
        row.fail(f"{row.dlq_valid} valid events dead-lettered")


# -- faults ----------------------------------------------------------------------------


class Fault:
    label = ""

    def inject(self, stack: Stack) -> str:
        raise NotImplementedError

    def end(self, stack: Stack, deadline: float) -> tuple[float | None, str]:
        """Wait for the fault's end: (time.monotonic() of it, how it ended) or (None, why not)."""
        raise NotImplementedError


class Kill(Fault):
    """A signal to one process of the stack; it ends when `up` has started it again
    (a new pid in pids.json) and, for a component, it answers."""

    def __init__(self, name: str, signum: signal.Signals) -> None:
        self.name, self.signum = name, signum
        sig = "kill -9" if signum == signal.SIGKILL else signum.name
        self.label = f"{sig} {name}"
        self.old: tuple[int, float] | None = None

    def inject(self, stack: Stack) -> str:
        self.old = stack.pids()[self.name]
        os.kill(self.old[0], self.signum)
        return f"{self.label} (pid {self.old[0]})"

    def end(self, stack: Stack, deadline: float) -> tuple[float | None, str]:
        def restarted() -> bool:
            entry = stack.pids().get(self.name)
            if entry is None or entry == self.old or not process_alive(*entry):
                return False
            return self.name in SERVICES or stack.answers(self.name)

        if wait_until(restarted, deadline, interval=0.1):
            return time.monotonic(), f"restarted by up (pid {stack.pids()[self.name][0]})"
        return None, f"{self.name} not restarted by up within {RESTART_BUDGET:.0f} s"


class Pause(Fault):
    """SIGSTOP of a component's whole process group, and of every descendant outside
    it (PostgreSQL's backends and auxiliary processes each call setsid(), so the
    postmaster's group is the postmaster alone); SIGCONT after STOP_SECONDS."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.label = f"SIGSTOP {name} {STOP_SECONDS:.0f}s"
        self.pgid = 0
        self.others: list[int] = []
        self.stopped_at = 0.0

    def inject(self, stack: Stack) -> str:
        self.pgid = stack.pids()[self.name][0]  # each component leads its own group
        stack.paused.append(self)
        # The leader first: a stopped postmaster forks no new backend meanwhile.
        os.killpg(self.pgid, signal.SIGSTOP)
        self.stopped_at = time.monotonic()
        for child in psutil.Process(self.pgid).children(recursive=True):
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                if os.getpgid(child.pid) != self.pgid:
                    os.kill(child.pid, signal.SIGSTOP)
                    self.others.append(child.pid)
        extra = f" and {len(self.others)} descendants in their own groups" if self.others else ""
        return f"SIGSTOP group {self.pgid} ({self.name}){extra}"

    def resume(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signal.SIGCONT)
        for pid in self.others:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)

    def end(self, stack: Stack, deadline: float) -> tuple[float | None, str]:
        # The fault's length, not a wait for an outcome.
        time.sleep(max(0.0, self.stopped_at + STOP_SECONDS - time.monotonic()))
        self.resume()
        stack.paused.remove(self)
        return time.monotonic(), f"SIGCONT after {time.monotonic() - self.stopped_at:.1f} s"


# -- scenarios ----------------------------------------------------------------------------


@dataclass
class Context:
    stack: Stack
    app: str
    run: str
    turns: int
    rate: float
    global_end: float

    def until(self, seconds: float) -> float:
        return min(time.monotonic() + seconds, self.global_end)

    def users(self, scenario: str, count: int) -> list[str]:
        return [f"chaos-{self.run}-{scenario}-u{k}" for k in range(count)]


def run_fault_scenario(ctx: Context, name: str, fault: Fault, *, compaction: bool = False) -> Row:
    """A burst with `fault` injected after a third of it (for compaction: once the
    compaction worker has applied its first fold of the requests sent mid-burst)."""
    stack = ctx.stack
    row = Row(name, fault.label)
    users = ctx.users(name, 4 if compaction else 3)
    turns = make_turns(ctx.app, users, 2, ctx.turns, "t")
    chains: dict[str, list[str]] = {}
    old: list[Turn] = []
    if compaction:
        old = old_turns(ctx.app, users)
        if not prepare_old_episodes(ctx, old, row):
            return row
    burst = Burst(stack, turns, ctx.rate).start()
    trigger = len(turns) // 3
    if compaction:
        burst.wait_sent(len(turns) // 4, ctx.until(60))
        chains = request_compactions(stack, users, row)
        done = wait_first_fold(stack, ctx.app, users, ctx.until(15))
        total = sum(len(c) for c in chains.values())
        where = f"{done}/{total} folds applied" if done else "no fold applied in 15 s"
    else:
        burst.wait_sent(trigger, ctx.until(60))
        where = f"{burst.sent}/{len(turns)} sent"
    stack.remember_descendants()
    injected_at = time.monotonic()
    detail = fault.inject(stack)
    row.at = f"{injected_at - burst.started:.1f}s ({where})"
    row.notes.append(f"fault: {detail} at {row.at}")
    say(f"    {detail} at {row.at}")
    ended_at, how = fault.end(stack, ctx.until(RESTART_BUDGET))
    row.notes.append(f"fault end: {how}")
    say(f"    {how}")
    if ended_at is None:
        # Nothing will bring it back: measure what the stack holds now.
        burst.stop()
        burst.join(ctx.until(20))
        obs = observe(stack, ctx.app, turns)
        tally(row, turns, obs, stack.peek())
        row.recovery = "never (not restarted)"
        row.recovered = False
        row.fail(how)
        return row
    burst.join(ctx.until(SEND_BUDGET + 20))
    accepted = [t for t in turns if t.event_id]
    also = None
    if compaction:

        def also() -> bool:
            return compaction_done(stack, ctx.app, chains)

    settled = settle(stack, ctx.app, accepted, ctx.until(APPLY_BUDGET), also=also)
    finish(row, settled, ended_at, turns, stack)
    if compaction:
        check_compaction(stack, ctx.app, old, chains, row)
    return row


def finish(row: Row, settled: Settled, ended_at: float, turns: list[Turn], stack: Stack) -> None:
    if settled.at is not None:
        row.recovery = f"{settled.at - ended_at:.1f}s"
    else:
        row.recovery = "no"
        row.recovered = False
        row.fail(settled.why)
    tally(row, turns, settled.obs, stack.peek())


def run_emulator_kill(ctx: Context, name: str) -> Row:
    """The emulator killed mid-burst: what it held undelivered dies with it (counted
    apart); after `up` restarts it, turns recorded then must all be applied, and
    nothing else may be missing."""
    stack = ctx.stack
    fault = Kill("pubsub-emulator", signal.SIGKILL)
    row = Row(name, fault.label)
    users = ctx.users(name, 3)
    turns = make_turns(ctx.app, users, 2, ctx.turns, "t")
    burst = Burst(stack, turns, ctx.rate).start()
    burst.wait_sent(len(turns) // 3, ctx.until(60))
    stack.remember_descendants()
    killed_at = time.monotonic()
    detail = fault.inject(stack)
    row.at = f"{killed_at - burst.started:.1f}s ({burst.sent}/{len(turns)} sent)"
    row.notes.append(f"fault: {detail} at {row.at}")
    say(f"    {detail} at {row.at}")
    ended_at, how = fault.end(stack, ctx.until(RESTART_BUDGET))
    row.notes.append(f"fault end: {how}")
    say(f"    {how}")
    if ended_at is None:
        burst.stop()
        burst.join(ctx.until(20))
        tally(row, turns, observe(stack, ctx.app, turns), None, emulator_killed_at=killed_at)
        row.recovery = "never (not restarted)"
        row.recovered = False
        row.fail(how)
        return row
    burst.join(ctx.until(SEND_BUDGET + 20))
    # Recorded after the restart: these must all arrive.
    after = make_turns(ctx.app, users, 2, 20, "after")
    Burst(stack, after, ctx.rate).start().join(ctx.until(SEND_BUDGET + 20))
    later = [t for t in turns + after if t.published_from and t.published_from >= killed_at]
    settled = settle(stack, ctx.app, later, ctx.until(APPLY_BUDGET))
    if settled.at is not None:
        row.recovery = f"{settled.at - ended_at:.1f}s"
    else:
        row.recovery = "no"
        row.recovered = False
        row.fail(f"turns accepted after the kill: {settled.why}")
    # What workers had pulled before the kill is applied within seconds; what the
    # emulator alone held is gone. Wait until the count stops moving.
    everything = [t for t in turns + after if t.event_id]
    stable_since, last = time.monotonic(), -1
    deadline = ctx.until(30)
    while time.monotonic() < deadline and time.monotonic() - stable_since < 5:
        obs = observe(stack, ctx.app, everything)
        now = len(missing(everything, obs, ("buffer", "archive")))
        if now != last:
            stable_since, last = time.monotonic(), now
        if now == 0:
            break
        time.sleep(POLL_SECONDS)
    tally(
        row,
        turns + after,
        observe(stack, ctx.app, everything),
        stack.peek(),
        emulator_killed_at=killed_at,
    )
    row.notes.append(
        "lost w/ emulator: accepted before the kill, not applied since (Pub/Sub itself "
        "would not lose them); 'lost' counts any other"
    )
    return row


# invalid events ---------------------------------------------------------------------


@dataclass
class Invalid:
    event_id: str
    data: bytes
    attributes: dict[str, str]
    ordering_key: str
    case: str
    key: tuple[str, str, str]  # where it would land if it were (wrongly) applied


INVALID_CASES = (
    "unknown event_type",
    "schema_version 9",
    "control character in user_id",
    "app attribute differs from the body",
    "created_at without an offset",
    "event_id not a UUID",
)


def invalid_events(app: str, sessions: list[tuple[str, str]], tag: str, each: int) -> list[Invalid]:
    """Messages that pass the `turns` topic's Avro schema but break a rule only the
    workers know (as in tests/integration/test_dead_letters.py), `each` per case,
    on the ordering keys of real sessions."""
    found = []
    for k in range(each * len(INVALID_CASES)):
        case = INVALID_CASES[k % len(INVALID_CASES)]
        user, session = sessions[k % len(sessions)]
        turn_id = f"invalid-{tag}-{k:03d}"
        message = encode(
            TurnRecorded(
                event_id=str(uuid.uuid4()),
                app=app,
                user_id=user,
                session_id=session,
                turn_id=turn_id,
                created_at=datetime.now(UTC),
                user="This event is invalid and must be dead-lettered.",
                assistant="Noted.",
            )
        )
        record = json.loads(message.data)
        attributes = dict(message.attributes)
        if case == "unknown event_type":
            attributes["event_type"] = "turn.exploded.v1"
        elif case == "schema_version 9":
            attributes["schema_version"] = "9"
        elif case == "control character in user_id":
            record["user_id"] = "bad\x07id"
        elif case == "app attribute differs from the body":
            record["app"] = "someone-else"  # the attribute keeps `app`: a replay filter finds it
        elif case == "created_at without an offset":
            record["created_at"] = "2026-01-01T00:00:00"
        else:
            record["event_id"] = attributes["event_id"] = f"not-a-uuid-{tag}-{k:03d}"
        found.append(
            Invalid(
                attributes["event_id"],
                json.dumps(record).encode(),
                attributes,
                message.ordering_key,
                case,
                (user, session, turn_id),
            )
        )
    return found


def publish_raw(
    stack: Stack, topic: str, messages: list[tuple[bytes, dict[str, str], str]]
) -> None:
    publisher = stack.publisher
    path = publisher.topic_path(topic)
    futures = [publisher.publish_raw(path, data, attrs, key) for data, attrs, key in messages]
    for future in futures:
        future.result(timeout=30)


def invalid_applied(obs: Observation, invalid: list[Invalid]) -> int:
    return sum(
        1 for i in invalid for found in (obs.buffer, obs.archive) if found and found.get(i.key)
    )


def run_invalid_events(ctx: Context, name: str) -> Row:
    """Invalid events published straight onto `turns` among valid turns: each must be
    dead-lettered once by each subscription, never applied, and block nothing."""
    stack = ctx.stack
    row = Row(name, "invalid events onto turns")
    users = ctx.users(name, 3)
    turns = make_turns(ctx.app, users, 2, ctx.turns, "t")
    sessions = sorted({(t.user_id, t.session_id) for t in turns})
    invalid = invalid_events(ctx.app, sessions, ctx.run, each=2)
    burst = Burst(stack, turns, ctx.rate).start()
    burst.wait_sent(len(turns) // 3, ctx.until(60))
    injected_at = time.monotonic()
    publish_raw(stack, "turns", [(i.data, i.attributes, i.ordering_key) for i in invalid])
    ended_at = time.monotonic()
    row.at = f"{injected_at - burst.started:.1f}s ({burst.sent}/{len(turns)} sent)"
    row.notes.append(
        f"fault: {len(invalid)} invalid events ({len(INVALID_CASES)} cases × 2) published "
        f"onto turns at {row.at}, on the ordering keys of the burst's sessions"
    )
    say(f"    {len(invalid)} invalid events published at {row.at}")
    burst.join(ctx.until(SEND_BUDGET + 20))
    accepted = [t for t in turns if t.event_id]
    settled = settle(stack, ctx.app, accepted, ctx.until(APPLY_BUDGET))
    finish(row, settled, ended_at, turns, stack)
    # Each invalid event must reach both subscriptions' dead letters.
    ids = [i.event_id for i in invalid]
    dlq: dict[str, Counter[str]] | None = None

    def all_there() -> bool:
        nonlocal dlq
        dlq = stack.peek(("turns-summary", "turns-extraction"))
        return dlq is not None and all(
            dlq[s][e] for s in ("turns-summary", "turns-extraction") for e in ids
        )

    wait_until(all_there, ctx.until(60), interval=1.0)
    per_queue = {s: sum(dlq[s][e] for e in ids) if dlq else 0 for s in TARGET_DLQ.values()}
    row.dlq_invalid = f"{per_queue['turns-summary']}+{per_queue['turns-extraction']}"
    row.notes.append(
        f"invalid dead-lettered: {per_queue['turns-summary']} in turns-summary-dlq, "
        f"{per_queue['turns-extraction']} in turns-extraction-dlq (want {len(ids)} each, once)"
    )
    for queue, count in per_queue.items():
        if count != len(ids) or (dlq and any(dlq[queue][e] != 1 for e in ids)):
            row.fail(f"invalid events in {queue}-dlq: {count}, want each of {len(ids)} once")
    applied = invalid_applied(observe(stack, ctx.app, turns), invalid)
    if applied:
        row.fail(f"{applied} invalid events applied")
    return row


# dead-letter replay -------------------------------------------------------------------


def run_dlq_replay(ctx: Context, name: str) -> Row:
    """Valid turn events (never recorded otherwise) and invalid ones put straight into
    turns-summary-dlq, then `agent-memory dlq replay turns-summary`. It must end; the
    valid ones are then applied once in the buffer and not archived (the replay is for
    turns-summary only); the invalid ones are back in turns-summary-dlq once each;
    turns-extraction-dlq gets none of them.

    The events are of an app of their own and the replay is given `--app` so that it
    touches only this scenario's dead letters (earlier scenarios may have left some)."""
    stack = ctx.stack
    app = f"chaos-{ctx.run}-replay"
    row = Row(name, "dlq replay turns-summary")
    users = ctx.users(name, 2)
    valid = make_turns(app, users, 2, 20, "dead")
    sessions = sorted({(t.user_id, t.session_id) for t in valid})
    invalid = invalid_events(app, sessions, f"{ctx.run}r", each=1)
    messages = []
    for turn in valid:
        turn.event_id, turn.attempts = turn.expected_event_id, 1
        message = encode(
            TurnRecorded(
                event_id=turn.event_id,
                app=app,
                user_id=turn.user_id,
                session_id=turn.session_id,
                turn_id=turn.turn_id,
                created_at=datetime.now(UTC),
                user=turn.text,
                assistant="Noted.",
            )
        )
        messages.append((message.data, message.attributes, message.ordering_key))
    messages += [(i.data, i.attributes, i.ordering_key) for i in invalid]
    dead = []
    for data, attributes, key in messages:
        dead.append(
            (
                data,
                {
                    **attributes,
                    DEAD_LETTER_REASON: "placed by bench/chaos.py",
                    DEAD_LETTER_SUBSCRIPTION: "turns-summary",
                    DEAD_LETTER_ATTEMPT: "5",
                    DEAD_LETTER_ORDERING_KEY: key,
                },
                "",
            )
        )
    ours = {t.event_id for t in valid} | {i.event_id for i in invalid}
    before = stack.peek(("turns-extraction",))
    extraction_before = (
        sum(n for e, n in before["turns-extraction"].items() if e in ours) if before else 0
    )
    publish_raw(stack, "turns-summary-dlq", dead)
    placed = wait_until(
        lambda: (
            (d := stack.peek(("turns-summary",))) is not None
            and all(d["turns-summary"][e] for e in ours)
        ),
        ctx.until(30),
        interval=1.0,
    )
    row.sent = row.accepted = len(valid)
    row.at = f"{len(valid)} valid + {len(invalid)} invalid in turns-summary-dlq"
    if not placed:
        row.fail("the dead letters put into turns-summary-dlq did not show up in it")
    argv = [*agent_memory(), "dlq", "replay", "turns-summary", "--app", app]
    say(f"    {' '.join(argv[-5:])} (budget {REPLAY_BUDGET:.0f} s)")
    started = time.monotonic()
    replay = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=stack.environment(),
        start_new_session=True,
    )
    try:
        out, err = replay.communicate(timeout=REPLAY_BUDGET)
        ended_at = time.monotonic()
        last = (out.strip().splitlines() or ["(no output)"])[-1]
        row.notes.append(
            f"replay ended in {ended_at - started:.1f} s, exit {replay.returncode}: {last}"
        )
        if replay.returncode != 0:
            row.fail(f"dlq replay exited {replay.returncode}: {err.strip()[-200:]}")
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(replay.pid, signal.SIGKILL)
        out, err = replay.communicate()
        ended_at = time.monotonic()
        replayed = err.count("replayed ")
        row.notes.append(
            f"replay did not end within {REPLAY_BUDGET:.0f} s (killed) after {replayed} "
            "re-publishes; the dead letters it held stay leased to it for the dead-letter "
            "subscription's ack deadline (600 s)"
        )
        row.fail(f"dlq replay did not end within {REPLAY_BUDGET:.0f} s")
    say(f"    {row.notes[-1]}")
    settled = settle(stack, app, valid, ctx.until(APPLY_BUDGET), targets=("buffer", "summary"))
    if settled.at is not None:
        row.recovery = f"{settled.at - ended_at:.1f}s"
    else:
        row.recovery = "no"
        row.recovered = False
        row.fail(settled.why)
    # The extraction worker sees the replayed messages too (the emulator ignores
    # subscription filters): wait until it has concluded each, then read the archive.
    extraction_log = stack.log_dir / "extraction.log"
    concluded = wait_until(
        lambda: all(e in handled_event_ids(extraction_log) for e in (t.event_id for t in valid)),
        ctx.until(15),
    )
    if not concluded:
        row.notes.append("the extraction worker did not log every replayed event in 15 s")
    obs = observe(stack, app, valid)
    tally(row, valid, obs, stack.peek(), targets=("buffer", "summary"))
    archived = 0 if obs.archive is None else sum(1 for t in valid if obs.archive.get(t.key))
    row.archive_once = f"{archived} (want 0)"
    if archived:
        row.fail(f"{archived} replayed events archived: the replay reached turns-extraction")
    dlq: dict[str, Counter[str]] | None = None

    def invalid_back() -> bool:
        nonlocal dlq
        dlq = stack.peek(("turns-summary", "turns-extraction"))
        return dlq is not None and all(dlq["turns-summary"][i.event_id] for i in invalid)

    wait_until(invalid_back, ctx.until(20), interval=1.0)
    back = sum(dlq["turns-summary"][i.event_id] for i in invalid) if dlq else 0
    extraction_after = sum(n for e, n in dlq["turns-extraction"].items() if e in ours) if dlq else 0
    row.dlq_invalid = f"{back}/{len(invalid)} back"
    row.notes.append(
        f"invalid: {back} back in turns-summary-dlq (want each of {len(invalid)} once); "
        f"turns-extraction-dlq: {extraction_before} of ours before, {extraction_after} after"
    )
    if dlq is None or any(dlq["turns-summary"][i.event_id] != 1 for i in invalid):
        row.fail(f"invalid events back in turns-summary-dlq: {back}, want each once")
    if extraction_after != extraction_before:
        row.fail(f"turns-extraction-dlq changed: {extraction_after - extraction_before} added")
    applied = invalid_applied(obs, invalid)
    if applied:
        row.fail(f"{applied} invalid events applied")
    return row


def handled_event_ids(path: Path) -> set[str]:
    found = set()
    for line in read_text(path).splitlines():
        if '"message handled"' in line:
            with contextlib.suppress(ValueError):
                found.add(json.loads(line).get("event_id"))
    return found


# compaction --------------------------------------------------------------------------


def marker(user: str, n: int) -> str:
    return f"mk{user.rsplit('-u', 1)[1]}x{n:02d}z"


def old_turns(app: str, users: list[str]) -> list[Turn]:
    """Turns created 60 days ago, each stating something the compaction keeps."""
    start = datetime.now(UTC) - timedelta(days=60)
    return [
        Turn(
            app,
            user,
            f"{user}-old",
            f"old-{n:02d}",
            f"For the archive we must keep marker {marker(user, n)} in the notes.",
            created_at=format_time(start + timedelta(minutes=n)),
        )
        for user in users
        for n in range(OLD_TURNS_PER_USER)
    ]


def prepare_old_episodes(ctx: Context, old: list[Turn], row: Row) -> bool:
    Burst(ctx.stack, old, rate=100).start().join(ctx.until(SEND_BUDGET))
    settled = settle(ctx.stack, ctx.app, old, ctx.until(60), targets=("archive",))
    if settled.at is None or not all(t.event_id for t in old):
        row.fail(f"the old episodes were not archived before the burst: {settled.why}")
        row.recovered = False
        return False
    return True


def request_compactions(stack: Stack, users: list[str], row: Row) -> dict[str, list[str]]:
    """One request per user; returns each user's chain of event ids (the request's,
    then each continuation's, derived as the worker derives them)."""
    chains = {}
    length = math.ceil(OLD_TURNS_PER_USER / COMPACTION_BATCH)
    with stack.client() as client:
        for user in users:
            try:
                accepted = client.request_compaction(
                    user, retention_days=COMPACTION_RETENTION_DAYS, batch_limit=COMPACTION_BATCH
                )
            except MemoryClientError as exc:
                row.fail(f"compaction request for {user} refused: {exc}")
                continue
            chain = [accepted.event_id]
            while len(chain) < length:
                chain.append(derived_event_id(chain[-1], "continue"))
            chains[user] = chain
    return chains


def compaction_revisions(conn: psycopg.Connection, app: str, users: list[str]) -> int:
    return conn.execute(
        "SELECT count(*) FROM memory_revisions r JOIN memories m ON m.id = r.memory_id "
        "WHERE m.app = %s AND m.user_id = ANY(%s) AND m.entity_name = %s",
        (app, users, COMPACTED_ENTITY),
    ).fetchone()[0]


def wait_first_fold(stack: Stack, app: str, users: list[str], deadline: float) -> int | None:
    """Folds applied once the first is (one connection, polled often: a fold takes
    tens of milliseconds); None if none was by `deadline`."""
    try:
        with stack.postgres() as conn:
            if wait_until(lambda: compaction_revisions(conn, app, users) > 0, deadline, 0.005):
                return compaction_revisions(conn, app, users)
    except psycopg.Error:
        return None
    return None


def old_left(conn: psycopg.Connection, app: str, users: list[str]) -> int:
    return conn.execute(
        "SELECT count(*) FROM episodes WHERE app = %s AND user_id = ANY(%s) "
        "AND created_at < now() - make_interval(days => %s)",
        (app, users, COMPACTION_RETENTION_DAYS),
    ).fetchone()[0]


def compaction_done(stack: Stack, app: str, chains: dict[str, list[str]]) -> bool:
    try:
        with stack.postgres() as conn:
            return old_left(conn, app, list(chains)) == 0
    except psycopg.Error:
        return False


def check_compaction(
    stack: Stack, app: str, old: list[Turn], chains: dict[str, list[str]], row: Row
) -> None:
    """Every old episode folded exactly once, none left, no error:
    - no episode older than the retention is left for these users;
    - each user's `compacted-episodes` memory has one revision per request of its
      chain (the request, then its continuations), in order, none twice: no request
      was applied twice or skipped;
    - its text holds each old turn's marker exactly once: every episode was folded;
    - no compaction request is in compaction-requests-dlq."""
    users = list(chains)
    problems = []
    try:
        with stack.postgres() as conn:
            left = old_left(conn, app, users)
            revisions = conn.execute(
                "SELECT m.user_id, r.event_id::text FROM memory_revisions r "
                "JOIN memories m ON m.id = r.memory_id WHERE m.app = %s AND m.user_id = ANY(%s) "
                "AND m.entity_name = %s ORDER BY r.id",
                (app, users, COMPACTED_ENTITY),
            ).fetchall()
            texts = dict(
                conn.execute(
                    "SELECT user_id, text FROM memories WHERE app = %s AND user_id = ANY(%s) "
                    "AND entity_name = %s AND valid_to IS NULL",
                    (app, users, COMPACTED_ENTITY),
                ).fetchall()
            )
    except psycopg.Error as exc:
        row.fail(f"compaction not checked: Postgres not readable ({type(exc).__name__})")
        return
    if left:
        problems.append(f"{left} old episodes left")
    folded_once = 0
    for user, chain in chains.items():
        applied = [event_id for u, event_id in revisions if u == user]
        if applied != chain:
            twice = sum(n - 1 for n in Counter(applied).values() if n > 1)
            problems.append(
                f"{user}: {len(applied)} folds applied ({twice} twice), chain of {len(chain)}"
            )
        text = texts.get(user, "")
        counts = [text.count(marker(user, n)) for n in range(OLD_TURNS_PER_USER)]
        folded_once += sum(1 for c in counts if c == 1)
        if any(c != 1 for c in counts):
            problems.append(f"{user}: markers in the summary {counts}")
    dlq = stack.peek(("compaction-requests",))
    ids = {e for chain in chains.values() for e in chain}
    dead = sum(n for e, n in dlq["compaction-requests"].items() if e in ids) if dlq else 0
    if dead:
        problems.append(f"{dead} compaction requests dead-lettered")
        row.dlq_valid += dead
    requests = sum(len(c) for c in chains.values())
    row.notes.append(
        f"compaction: {len(old)} old episodes of {len(users)} users, {requests} requests "
        f"(batch {COMPACTION_BATCH}); {folded_once}/{len(old)} folded exactly once into "
        f"the summary, {left} left, {len(revisions)} folds applied, {dead} dead-lettered"
    )
    for problem in problems:
        row.fail(f"compaction: {problem}")


# -- the run ----------------------------------------------------------------------------


SCENARIOS: dict[str, Callable[[Context, str], Row]] = {
    "summary-kill9": lambda c, n: run_fault_scenario(c, n, Kill("summary", signal.SIGKILL)),
    "extraction-kill9": lambda c, n: run_fault_scenario(c, n, Kill("extraction", signal.SIGKILL)),
    "compaction-kill9": lambda c, n: run_fault_scenario(
        c, n, Kill("compaction", signal.SIGKILL), compaction=True
    ),
    "summary-sigterm": lambda c, n: run_fault_scenario(c, n, Kill("summary", signal.SIGTERM)),
    "extraction-sigterm": lambda c, n: run_fault_scenario(c, n, Kill("extraction", signal.SIGTERM)),
    "compaction-sigterm": lambda c, n: run_fault_scenario(
        c, n, Kill("compaction", signal.SIGTERM), compaction=True
    ),
    "valkey-kill9": lambda c, n: run_fault_scenario(c, n, Kill("valkey", signal.SIGKILL)),
    "valkey-sigstop": lambda c, n: run_fault_scenario(c, n, Pause("valkey")),
    "postgres-kill9": lambda c, n: run_fault_scenario(c, n, Kill("postgres", signal.SIGKILL)),
    "postgres-sigstop": lambda c, n: run_fault_scenario(c, n, Pause("postgres")),
    "emulator-kill9": run_emulator_kill,
    "invalid-events": run_invalid_events,
    "dlq-replay": run_dlq_replay,
}


def selected(only: list[str]) -> list[str]:
    if not only:
        return list(SCENARIOS)
    names = [n.strip() for item in only for n in item.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(unknown)} (see --list)")
    return [n for n in SCENARIOS if n in names]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="scenario name(s)")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--keep", action="store_true", help="keep the data dir")
    parser.add_argument("--turns", type=int, default=150, help="turns per burst")
    parser.add_argument("--rate", type=float, default=50.0, help="turns per second")
    parser.add_argument("--deadline", type=float, default=1200.0, help="seconds for the run")
    args = parser.parse_args()
    if args.list:
        print("\n".join(SCENARIOS))
        return 0
    names = selected(args.only)
    configure_logging("console", "ERROR")
    # SIGTERM and SIGHUP unwind like Ctrl-C, through the finally that stops the stack.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda s, _f: sys.exit(128 + s))
    root = Path(tempfile.mkdtemp(prefix="agent-memory-chaos-"))
    run = uuid.uuid4().hex[:6]
    started = time.monotonic()
    rows: list[Row] = []
    interrupted = False
    stacks = 0
    stack: Stack | None = None
    try:
        for name in names:
            if time.monotonic() >= started + args.deadline:
                rows.append(Row(name, "-", recovery="skipped", failures=["global deadline"]))
                continue
            if stack is None:
                stacks += 1
                stack = Stack(root, stacks)
                say(f"starting agent-memory up (data dir {stack.data_dir})")
                stack.start()
                say(f"  up: API {stack.api_url}, logs in {stack.log_dir}")
            say(f"[{name}]")
            settings = stack.settings
            assert settings is not None
            ctx = Context(
                stack, settings.default_app, run, args.turns, args.rate, started + args.deadline
            )
            began = time.monotonic()
            row = SCENARIOS[name](ctx, name)
            rows.append(row)
            usable = usable_after(stack, ctx, row)
            say(
                f"    {'PASS' if row.ok else 'FAIL'} in {time.monotonic() - began:.0f} s"
                + ("" if row.ok else ": " + "; ".join(row.failures))
            )
            if not row.recovered:
                say("    log tails of the stack's processes:")
                say(indent(stack.log_tails(), "      "))
            if not usable:
                say("  the stack is not healthy: the next scenario gets a new one")
                stop_stack(stack)
                stack = None
    except StackError as exc:
        say(f"the stack could not be started: {exc}")
        if stack is not None:
            say(indent(stack.log_tails(), "      "))
        return 2
    except KeyboardInterrupt:
        say("interrupted: stopping the stack")
        interrupted = True
    finally:
        if stack is not None:
            stop_stack(stack)
        if args.keep:
            say(f"data kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print_report(rows, time.monotonic() - started)
    if interrupted:
        return 130
    return 0 if rows and all(r.ok for r in rows) else 1


def usable_after(stack: Stack, ctx: Context, row: Row) -> bool:
    """Is the stack fit for the next scenario? Every process alive and the API ready,
    and a probe turn carried all the way (buffered, concluded by the summary worker,
    archived) within 30 s: a stalled worker is alive and ready too. A stack that
    fails only the probe counts against the scenario that left it so."""
    # A restarted worker may still be starting; a component that never came back won't.
    if not wait_until(stack.healthy, ctx.until(15 if row.recovered else 0), 0.5):
        return False
    probe = make_turns(ctx.app, ctx.users(f"{row.name}-probe", 1), 1, 1, "probe")
    Burst(stack, probe, rate=10, threads=1).start().join(ctx.until(SEND_BUDGET))
    if probe[0].event_id and settle(stack, ctx.app, probe, ctx.until(30)).at is not None:
        return True
    row.fail("afterwards the stack did not carry a probe turn through within 30 s")
    row.recovered = False
    return False


def stop_stack(stack: Stack) -> None:
    # A second Ctrl-C must not interrupt the stop half-way.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        killed = stack.stop()
    finally:
        signal.signal(signal.SIGINT, previous)
    if killed:
        say(f"  killed what the stack left behind: {', '.join(killed)}")


def indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def print_report(rows: list[Row], seconds: float) -> None:
    say("")
    say(table(rows))
    say("")
    for row in rows:
        say(f"{row.name}: {'PASS' if row.ok else 'FAIL'}")
        for note in row.notes:
            say(f"    {note}")
        for failure in row.failures:
            say(f"    FAIL: {failure}")
    passed = sum(1 for r in rows if r.ok)
    say(f"\n{passed} of {len(rows)} scenarios passed in {seconds:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
