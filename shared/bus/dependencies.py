"""What a worker knows of its dependencies: which are down, since when, and when
each is back.

A handler that fails because Valkey, Postgres, Pub/Sub, the LLM or the
embedding endpoint is down reports it here (`report`). The dependency is then
down for the whole process: its runtimes stop pulling and hold what they have,
and one thread probes the dependency with exponential backoff and jitter
(`AM_DEPENDENCY_RETRY_MIN_SECONDS` to `_MAX_SECONDS`) until it answers. Postgres
and Valkey are also probed every `AM_DEPENDENCY_PROBE_SECONDS` while up, so a
server that hangs (stopped, not dead) is noticed although no handler fails.

A dependency without a probe counts as back once its backoff has passed: the
held messages are the probe.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog

from shared.metrics import DEPENDENCY_UP

log = structlog.get_logger("agent_memory.worker")

Check = Callable[[], object]


@dataclass
class Probe:
    check: Check
    periodic: bool = False  # probed while up too (a server that hangs makes no errors)
    recovered: Callable[[], object] | None = None  # run once when it is back


@dataclass
class _State:
    down_since: float | None = None
    reason: str = ""
    failures: int = 0  # probes failed in a row (the backoff's exponent)
    next_probe: float = 0.0
    up_since: float = field(default_factory=time.monotonic)


class Dependencies:
    """The process's view of its dependencies, shared by its runtimes."""

    def __init__(
        self,
        probes: Mapping[str, Probe] | None = None,
        *,
        retry_min: float = 0.5,
        retry_max: float = 30.0,
        probe_interval: float = 10.0,
    ) -> None:
        self.probes = dict(probes or {})
        self.retry_min = retry_min
        self.retry_max = max(retry_max, retry_min)
        self.probe_interval = probe_interval
        self._states: dict[str, _State] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        for name in self.probes:
            self._states[name] = _State()
            DEPENDENCY_UP.labels(name).set(1)

    # -- what runtimes ask ------------------------------------------------------
    @property
    def ready(self) -> bool:
        with self._cond:
            return not any(s.down_since is not None for s in self._states.values())

    def down(self) -> dict[str, str]:
        """Each dependency that is down, with the error that said so."""
        with self._cond:
            return {n: s.reason for n, s in self._states.items() if s.down_since is not None}

    def states(self) -> dict[str, bool]:
        """Each dependency this worker knows of: True while it answers."""
        with self._cond:
            return {n: s.down_since is None for n, s in self._states.items()}

    def has_probe(self, name: str) -> bool:
        return name in self.probes

    def wait_until_ready(self, stopping: threading.Event, timeout: float | None = None) -> bool:
        """Block until every dependency is up (True), or `stopping` is set or
        `timeout` passes (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while any(s.down_since is not None for s in self._states.values()):
                left = None if deadline is None else deadline - time.monotonic()
                if stopping.is_set() or (left is not None and left <= 0):
                    return False
                # Short waits: `stopping` is an event of its own, not this condition.
                self._cond.wait(timeout=0.2 if left is None else min(0.2, left))
        return not stopping.is_set()

    def report(self, name: str, error: BaseException) -> None:
        """A handler failed because `name` is down."""
        now = time.monotonic()
        with self._cond:
            state = self._states.setdefault(name, _State())
            if state.down_since is not None:
                return
            # Down again soon after it came back: keep backing off where it stopped.
            if now - state.up_since > self.retry_max:
                state.failures = 0
            state.down_since = now
            state.reason = f"{type(error).__name__}: {error}"[:500]
            state.next_probe = now + self._delay(state.failures)
            self._cond.notify_all()
        DEPENDENCY_UP.labels(name).set(0)
        log.warning(
            "dependency down; holding messages until it answers",
            dependency=name,
            error=state.reason,
        )
        self._ensure_thread()

    # -- probing ------------------------------------------------------------------
    def start(self) -> None:
        """Start probing (also the periodic probes of dependencies that are up)."""
        self._ensure_thread()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _ensure_thread(self) -> None:
        with self._cond:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(target=self._run, name="dependencies", daemon=True)
            self._thread.start()

    def _delay(self, failures: int) -> float:
        """Exponential backoff with equal jitter: half fixed, half random."""
        ceiling = min(self.retry_max, self.retry_min * 2**failures)
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - jitter

    def _due(self, now: float) -> tuple[list[str], float]:
        """The dependencies to probe now, and when the next one is due."""
        due, next_at = [], now + self.probe_interval
        for name, state in self._states.items():
            if state.down_since is None:
                probe = self.probes.get(name)
                if probe is None or not probe.periodic:
                    continue
                at = max(state.next_probe, state.up_since + self.probe_interval)
            else:
                at = state.next_probe
            if at <= now:
                due.append(name)
            else:
                next_at = min(next_at, at)
        return due, next_at

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                due, next_at = self._due(time.monotonic())
                if not due:
                    self._cond.wait(timeout=max(0.01, next_at - time.monotonic()))
                    continue
            for name in due:
                self._probe(name)

    def _probe(self, name: str) -> None:
        probe = self.probes.get(name)
        error: BaseException | None = None
        if probe is not None:
            try:
                probe.check()
            except Exception as exc:  # any failure means: still down
                error = exc
        with self._cond:
            was_down = self._states[name].down_since
        if error is None and was_down is not None and probe and probe.recovered:
            # Before the handlers resume, so that none meets what the outage broke.
            try:
                probe.recovered()
            except Exception as exc:  # only a clean-up; the handlers find out anyway
                log.warning("after-outage clean-up failed", dependency=name, error=repr(exc))
        now = time.monotonic()
        with self._cond:
            state = self._states[name]
            newly = state.down_since is None
            if error is None:
                state.down_since, state.reason = None, ""
                state.up_since = now
                state.next_probe = now + self.probe_interval
                self._cond.notify_all()
            else:
                if newly:
                    state.down_since = now
                    if now - state.up_since > self.retry_max:
                        state.failures = 0
                else:
                    state.failures += 1
                state.next_probe = now + self._delay(state.failures)
                state.reason = f"{type(error).__name__}: {error}"[:500]
        if error is None:
            if was_down is not None:
                DEPENDENCY_UP.labels(name).set(1)
                log.info(
                    "dependency back; resuming",
                    dependency=name,
                    down_seconds=round(now - was_down, 3),
                )
        elif newly:
            DEPENDENCY_UP.labels(name).set(0)
            log.warning("dependency down (probe)", dependency=name, error=state.reason)
        else:
            log.info(
                "dependency still down",
                dependency=name,
                error=state.reason,
                retry_in_s=round(state.next_probe - now, 3),
            )
